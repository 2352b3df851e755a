"""Analyzers: how a token of ``projections.ranking.bm25_rules.tokenize`` becomes an index term.

* ``plain``: the token itself (the default; what the index stores).
* ``english``: English stop words dropped, every other token reduced to its Snowball English
  stem (PyStemmer, the Snowball project's C stemmers), so "Deploys" and "deploy" match and
  "production" matches "product".

The index keeps plain terms only; an ``english`` query maps each plain term to its stem once
(cached per term) and merges the postings of the terms sharing a stem (see
``projections.ranking.columns``), so no second index is built.
"""

from __future__ import annotations

from functools import lru_cache

import Stemmer

# The Snowball project's English stop-word list (snowballstem.org, algorithms/english/stop.txt),
# folded to the forms ``tokenize`` produces: the apostrophe splits "don't" into "don" and "t".
ENGLISH_STOP_WORDS = frozenset("""
i me my myself we our ours ourselves you your yours yourself yourselves he him his himself she
her hers herself it its itself they them their theirs themselves what which who whom this that
these those am is are was were be been being have has had having do does did doing would
should could ought i'm you're he's she's it's we're they're i've you've we've they've i'd you'd
he'd she'd we'd they'd i'll you'll he'll she'll we'll they'll isn't aren't wasn't weren't
hasn't haven't hadn't doesn't don't didn't won't wouldn't shan't shouldn't can't cannot
couldn't mustn't let's that's who's what's here's there's when's where's why's how's a an the
and but if or because as until while of at by for with about against between into through
during before after above below to from up down in out on off over under again further then
once here there when where why how all any both each few more most other some such no nor not
only own same so than too very
""".replace("'", " ").split())

_stem = Stemmer.Stemmer("english").stemWord


@lru_cache(maxsize=1 << 16)
def english_term(token: str) -> str | None:
    """The ``english`` term of a plain token, or None for a stop word."""
    if token in ENGLISH_STOP_WORDS:
        return None
    return str(_stem(token))


def analyze(tokens: list[str], analyzer: str) -> list[str]:
    """``tokens`` as terms of ``analyzer`` (stop words dropped under ``english``)."""
    if analyzer == "plain":
        return tokens
    if analyzer == "english":
        return [t for t in map(english_term, tokens) if t is not None]
    raise ValueError(f"unknown analyzer {analyzer!r}; expected 'plain' or 'english'")
