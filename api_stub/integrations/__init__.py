"""Adapters for the frameworks agents are built with, each over the public SDK
(``hivemind_memory.Memory``) and each in its own module, imported only when used:

- ``hivemind_memory.integrations.langchain``: a retriever and the memory tools
  (``pip install 'hivemind-memory[langchain]'``);
- ``hivemind_memory.integrations.langgraph``: a LangGraph ``BaseStore``
  (``[langgraph]``);
- ``hivemind_memory.integrations.llamaindex``: a retriever and a memory block
  (``[llamaindex]``).

Importing this package imports no framework.
"""
