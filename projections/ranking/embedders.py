"""Embedders: text -> vector, for the semantic part of relevance.

An ``Embedder`` has a ``name``, a ``dim`` and a ``digest`` (a fingerprint of its version:
weights, tokenizer, pooling) and turns a batch of texts into a float matrix. The ranking core
never builds one: it is handed one (``NamespaceIndex.embed_missing``, the query path), so the
core stays pure. ``load_embedder`` builds the one the config names:

* ``"wordllama"`` (default): the 256-d WordLlama ``l2_supercat`` model shipped inside the
  ``wordllama`` wheel, read straight from the package's own files (its tokenizer JSON and
  safetensors weights, with ``tokenizers`` and ``safetensors``): no download, no API key,
  and the ``wordllama`` module itself is never imported (its import configures the root
  logger). Its vectors are cut to their first 128 components: the model is trained so that
  its leading components are an embedding of their own (Matryoshka), and on LoCoMo 128
  components find as much as 256 (0.625 / 0.750 / 0.817 vs 0.631 / 0.748 / 0.818 at 200 / 500 /
  1000 tokens) at half the memory and half the matrix product per query (100k notes: 51 MiB,
  ~3 ms on one core). ``"wordllama-256"`` keeps all 256 (and ``"wordllama-64"`` 64).
  A text's vector is the mean of the token embeddings of its content words: the
  words of ``relevance.tokenize`` (casefolded) that are not English stop words, each
  tokenised as WordLlama tokenises a word after a space. On the text those words make, joined
  by single spaces, that is exactly WordLlama's own ``embed`` (its normaliser turns each space
  into ``▁``); dropping stop words and case lifts LoCoMo's cosine-only recall from
  0.34/0.48/0.58 to 0.37/0.50/0.61 at 200/500/1000 tokens. Word vectors (sum and token
  count) are cached, so a batch costs one tokenizer call for the words not seen yet and one
  gather-sum over (text, distinct word) pairs. A text's vector does not depend on the
  batch it came in (the sums are exact, see ``WordLlamaEmbedder``), so a live index and one
  rebuilt from the log get the same vectors.
* ``"none"``: no embedder (relevance then has no semantic part but caller-supplied vectors).
* ``"package.module:factory"``: ``factory()`` returns any object with the protocol's
  attributes (sentence-transformers, an API client, ...). Only from a config file: a
  per-query override cannot name an embedder.

Embeddings are derived data: computed from the texts in batches when the worker builds or
refreshes an index, kept in the index snapshot with the embedder's digest, never written to
the log; a snapshot of another digest is recomputed.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import threading
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from hivemind_memory.projections.ranking.analyzer import ENGLISH_STOP_WORDS
from hivemind_memory.projections.ranking.bm25_rules import tokenize

WORDLLAMA_CONFIG = "l2_supercat"
WORDLLAMA_DIM = 256
"""Components of the bundled model's vectors."""
WORDLLAMA_DIMS = {"wordllama": 128, "wordllama-64": 64, "wordllama-128": 128,
                  "wordllama-256": 256}
"""Embedder specs of the bundled model and how many leading components each keeps."""
_TOKENIZER = f"tokenizers/{WORDLLAMA_CONFIG}_tokenizer_config.json"
_WEIGHTS = f"weights/{WORDLLAMA_CONFIG}_{WORDLLAMA_DIM}.safetensors"
POOLING = "mean-of-content-word-tokens-v1"
"""Part of the bundled embedder's digest: how token vectors become a text's vector."""
_PAIRS = 1 << 13
"""(text, word) cells pooled at once (bounds the temporary to ~16 MiB)."""
FEW_WORDS = 32
"""New words up to this many are tokenized one by one: ``encode_batch`` hands them to the
tokenizer's thread pool, whose threads cost more CPU than a query's few words (a query of
three new words: ~190 us of CPU with the pool, ~100 us without, in one run)."""
MAX_WORDS = 1 << 15
"""Word vectors the bundled embedder keeps (16 MiB at 128 components); past that it starts
over (a word's vector is the same bits each time it is worked out)."""


@runtime_checkable
class Embedder(Protocol):
    """What the ranking needs from an embedder."""

    @property
    def name(self) -> str:
        """A short name (``wordllama-l2_supercat-256``)."""
        ...

    @property
    def dim(self) -> int:
        """Length of every vector it returns."""
        ...

    def digest(self) -> str:
        """A fingerprint of the version: two embedders with one digest give the same vectors."""
        ...

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.floating[Any]]:
        """One row of ``dim`` floats per text (any scale: the index normalises)."""
        ...


def wordllama_folder() -> Path:
    """The installed ``wordllama`` package's folder (found without importing it)."""
    spec = importlib.util.find_spec("wordllama")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the wordllama package is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


class WordLlamaEmbedder:
    """The bundled embedder (see the module docstring).

    Exact arithmetic, so a vector never depends on the batch it was computed in, the order of
    the words or the BLAS: the weights are float16, i.e. multiples of 2**-24 below 2**4 in
    magnitude. A word's vector (the sum of its few tokens' vectors, computed in float64) is
    kept rounded to float32, still a multiple of 2**-24 (below 2**8); a text has at most 2**16
    tokens, so every sum of word vectors times their counts is a multiple of 2**-24 below 2**20
    and exact in float64. The only roundings are the word vector's (the same whenever it is
    worked out) and the final division by the token count."""

    def __init__(self, dim: int = WORDLLAMA_DIMS["wordllama"],
                 folder: Path | None = None) -> None:
        if not 1 <= dim <= WORDLLAMA_DIM:
            raise ValueError(f"the bundled model has {WORDLLAMA_DIM} components, not {dim}")
        self._dim = dim
        from safetensors import safe_open
        from tokenizers import Tokenizer

        base = folder or wordllama_folder()
        self._files = (base / _TOKENIZER, base / _WEIGHTS)
        self._tok = Tokenizer.from_file(str(self._files[0]))
        self._tok.no_padding()
        self._tok.no_truncation()
        with safe_open(str(self._files[1]), framework="np") as f:  # only the kept columns
            table = f.get_slice("embedding.weight")[:, :dim]
        self._table: npt.NDArray[np.float16] = np.ascontiguousarray(table, np.float16)
        self._word: dict[str, int] = {}
        """Word -> row of ``_sums`` (row 0: the empty word, zeros; stop words map to it)."""
        self._sums: npt.NDArray[np.float32] = np.zeros((1, dim), np.float32)
        self._counts: npt.NDArray[np.float64] = np.zeros(1, np.float64)
        self._used = 1
        """Rows of ``_sums`` (and ``_counts``) that hold a word; the rest is room, doubled
        when full (up to ``MAX_WORDS``), so learning a query's few new words does not copy
        the whole cache."""
        self._lock = threading.RLock()
        """Held while the word cache is read or grown: one embedder serves every thread of a
        process (``embedder_for``), and a row learnt by one thread must not be read by another
        before ``_sums`` holds it (or after the cache started over)."""
        self._forget_words()
        self._digest: str | None = None

    @property
    def name(self) -> str:
        return f"wordllama-{WORDLLAMA_CONFIG}-{WORDLLAMA_DIM}-first-{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def digest(self) -> str:
        """sha256 over the pooling rule, the tokenizer file and the weights file."""
        if self._digest is None:
            h = hashlib.sha256(POOLING.encode())
            for p in self._files:
                h.update(p.read_bytes())
            self._digest = f"{self.name}:{h.hexdigest()[:16]}"
        return self._digest

    def _forget_words(self) -> None:
        self._word = dict.fromkeys(ENGLISH_STOP_WORDS, 0)
        self._sums = np.zeros((1, self._dim), np.float32)
        self._counts = np.zeros(1, np.float64)
        self._used = 1

    def rows(self, words: Sequence[str]) -> npt.NDArray[np.int64]:
        """The ``_sums`` row of each word (learning the new ones with one tokenizer call; the
        cache starts over when it would pass ``MAX_WORDS``: at most ``MAX_WORDS`` distinct
        words per call)."""
        with self._lock:
            known = self._word
            new = [w for w in dict.fromkeys(words) if w not in known]
            if new and self._used + len(new) > MAX_WORDS:
                self._forget_words()
                known = self._word
                new = [w for w in dict.fromkeys(words) if w not in known]
            if new:
                if len(new) <= FEW_WORDS:  # a query's: no thread pool (its start costs more)
                    enc = [self._tok.encode(w, add_special_tokens=False) for w in new]
                else:
                    enc = self._tok.encode_batch(new, add_special_tokens=False)
                lengths = np.array([len(e.ids) for e in enc], np.int64)
                ids = np.fromiter((i for e in enc for i in e.ids), np.int64, int(lengths.sum()))
                vecs = self._table[np.clip(ids, 0, len(self._table) - 1)].astype(np.float64)
                sums = np.zeros((len(new), self._dim), np.float64)
                has = lengths > 0
                if len(ids):  # a word's tokens in order (exact: see the class docstring)
                    starts = (np.cumsum(lengths) - lengths)[has]
                    sums[has] = np.add.reduceat(vecs, starts, axis=0)
                base = self._used
                need = base + len(new)
                if need > len(self._sums):
                    cap = max(need, min(MAX_WORDS, 2 * len(self._sums)))
                    grown = np.zeros((cap, self._dim), np.float32)
                    grown[:base] = self._sums[:base]
                    counts = np.zeros(cap, np.float64)
                    counts[:base] = self._counts[:base]
                    self._sums, self._counts = grown, counts
                self._sums[base:need] = sums
                self._counts[base:need] = lengths
                self._used = need
                for i, w in enumerate(new):
                    known[w] = base + i
            return np.fromiter((known[w] for w in words), np.int64, len(words))

    def embed_bags(self, words: Sequence[str], per_text: npt.NDArray[np.int64],
                   word_at: npt.NDArray[np.int64],
                   counts: npt.NDArray[np.floating[Any]]) -> npt.NDArray[np.float64]:
        """The vectors of texts given as bags of words: text ``i`` holds word
        ``words[word_at[j]]`` ``counts[j]`` times for ``j`` in its run (``per_text[i]``
        entries, texts one after the other); the same vector ``embed`` gives its text, from
        the words ``relevance.tokenize`` makes of it (stop words may be among them)."""
        with self._lock:  # rows and the _sums they index: one state of the cache
            cnt = np.asarray(counts, np.float64)
            at = np.asarray(word_at, np.int64)
            n = len(per_text)
            out = np.zeros((n, self._dim), np.float64)
            if not n:
                return out
            used = np.unique(at)
            few = len(used) <= MAX_WORDS // 2  # every word at once; else block by block
            row = np.zeros(max(len(words), 1), np.int64)
            if few and len(used):
                row[used] = self.rows([words[i] for i in used.tolist()])
            starts = np.cumsum(per_text) - per_text
            # texts by bag size, padded into (texts, width) blocks of <= _PAIRS cells, so the
            # sum over a text's words is one batched matrix product (exact in any order)
            by_size = np.argsort(per_text, kind="stable")
            a = 0
            while a < n:
                z = a + 1
                while z < n and (z + 1 - a) * max(1, int(per_text[by_size[z]])) <= _PAIRS:
                    z += 1
                width = max(1, int(per_text[by_size[z - 1]]))
                texts = by_size[a:z]
                cells = starts[texts][:, None] + np.arange(width)[None, :]
                inside = np.arange(width)[None, :] < per_text[texts][:, None]
                cells = np.where(inside, cells, 0)
                w = np.where(inside, at[cells] if len(at) else 0, 0)
                if not few:  # this block's words (at most _PAIRS of them)
                    mine = np.unique(w[inside])
                    row[mine] = self.rows([words[i] for i in mine.tolist()])
                r = np.where(inside, row[w], 0)
                c = np.where(inside, cnt[cells] if len(cnt) else 0.0, 0.0)
                total = np.matmul(c[:, None, :], self._sums[r].astype(np.float64))[:, 0, :]
                tokens = (c * self._counts[r]).sum(axis=1)
                out[texts] = total / np.maximum(tokens, 1.0)[:, None]
                a = z
            return out

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float64]:
        """The mean token vector of each text's content words (zeros for a text without)."""
        if len(texts) == 1:
            return self._embed_one(texts[0])
        counted = [Counter(tokenize(t)) for t in texts]
        per_text = np.array([len(c) for c in counted], np.int64)
        words = [w for c in counted for w in c]
        counts = np.fromiter((k for c in counted for k in c.values()), np.float64, len(words))
        return self.embed_bags(words, per_text, np.arange(len(words)), counts)


    def _embed_one(self, text: str) -> npt.NDArray[np.float64]:
        """``embed([text])`` for one text (a query's), without ``embed_bags``' blocks: one
        product of its word counts and their vectors, the same bits (exact sums, see the
        class docstring; the same final division)."""
        counted = Counter(tokenize(text))
        out = np.zeros((1, self._dim), np.float64)
        if not counted:
            return out
        if len(counted) > MAX_WORDS // 2:  # the blocks of embed_bags
            return self.embed_bags(list(counted), np.array([len(counted)], np.int64),
                                   np.arange(len(counted)),
                                   np.fromiter(counted.values(), np.float64, len(counted)))
        cnt = np.fromiter(counted.values(), np.float64, len(counted))
        with self._lock:  # rows and the _sums they index: one state of the cache
            r = self.rows(list(counted))
            total = cnt @ self._sums[r].astype(np.float64)
            tokens = float((cnt * self._counts[r]).sum())
        out[0] = total / max(tokens, 1.0)
        return out


@functools.lru_cache(maxsize=8)
def embedder_for(spec: str) -> Embedder | None:
    """``load_embedder(spec)``, loaded once per process (the bundled model takes ~0.1 s and
    16 MiB). Only for specs from a config file or the command line: a spec read from Redis
    (a filed config) must never reach it, since a plugin spec imports code."""
    return load_embedder(spec)


def load_embedder(spec: str) -> Embedder | None:
    """The embedder a config names (see the module docstring); None for ``"none"``."""
    if spec == "none":
        return None
    if spec in WORDLLAMA_DIMS:
        return WordLlamaEmbedder(WORDLLAMA_DIMS[spec])
    module, colon, attr = spec.partition(":")
    if not colon or not module or not attr:
        raise ValueError(f"unknown embedder {spec!r}: expected one of "
                         f"{', '.join(WORDLLAMA_DIMS)}, 'none' or 'package.module:factory'")
    got = getattr(importlib.import_module(module), attr)()
    if not isinstance(got, Embedder):
        raise TypeError(f"embedder {spec!r} lacks name, dim, digest() or embed()")
    return got
