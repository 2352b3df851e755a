"""The bundled embedder (WordLlama from its wheel, offline) and the embedder specs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from hivemind_memory.projections.ranking.analyzer import ENGLISH_STOP_WORDS
from hivemind_memory.projections.ranking.bm25_rules import tokenize
from hivemind_memory.projections.ranking.embedders import (
    Embedder,
    WordLlamaEmbedder,
    embedder_for,
    load_embedder,
    wordllama_folder,
)

TEXTS = ["Deploys go through ArgoCD to production",
         "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
         "the of a", "", "café crème, naïve résumé", "x_y v2 2026-12-01",
         "redis " * 300]


def bundled(dim: int = 128) -> WordLlamaEmbedder:
    got = embedder_for({128: "wordllama", 256: "wordllama-256", 64: "wordllama-64"}[dim])
    assert isinstance(got, WordLlamaEmbedder)
    return got


def content(text: str) -> str:
    return " ".join(w for w in tokenize(text) if w not in ENGLISH_STOP_WORDS)


def test_it_is_wordllamas_own_embed_of_the_content_words() -> None:
    import wordllama  # the reference: the package's own loader and mean pooling

    ref = wordllama.WordLlama.load(cache_dir=wordllama_folder(), disable_download=True)
    full, half = bundled(256), bundled(128)
    for text in TEXTS:
        words = content(text)
        if not words:
            assert not full.embed([text]).any()  # no content word: a zero vector
            continue
        want = ref.embed([words])[0]
        assert full.embed([text])[0] == pytest.approx(want, abs=1e-6)
        assert half.embed([text])[0] == pytest.approx(want[:128], abs=1e-6)  # its prefix
    assert full.dim == 256 and half.dim == 128 and bundled(64).dim == 64


def test_a_vector_never_depends_on_its_batch_nor_on_case_and_stop_words() -> None:
    e = bundled()
    alone = np.vstack([e.embed([t]) for t in TEXTS])
    together = e.embed(TEXTS)
    backwards = e.embed(TEXTS[::-1])[::-1]
    assert (alone == together).all() and (together == backwards).all()  # to the bit
    a, b = e.embed(["The DEPLOY of the canary", "deploy canary"])
    assert (a == b).all()
    c, d = e.embed(["deploy canary canary", "deploy canary"])
    assert not (c == d).all()  # counts matter


def test_one_text_alone_is_its_vector_in_any_batch_to_the_bit() -> None:
    """``embed`` of a single text (a query's: one product, no blocks) against the same text
    in batches: texts of 1-400 words, repeated words, stop words, new words and words seen."""
    import random

    rng = random.Random(5)
    vocab = [f"w{i}x" for i in range(300)] + ["the", "of", "deploy", "café", "2026-12-01"]
    texts = [" ".join(rng.choices(vocab, k=rng.choice((1, 2, 3, 7, 40, 400))))
             for _ in range(120)] + TEXTS
    e = bundled()
    alone = np.vstack([e.embed([t]) for t in texts])
    assert (alone == e.embed(texts)).all()
    assert (alone[::-1] == e.embed(texts[::-1])).all()
    assert len({r.tobytes() for r in alone}) > 100  # the texts' vectors differ


def test_bags_of_words_give_the_vectors_of_their_texts() -> None:
    e = bundled()
    counted = [Counter(tokenize(t)) for t in TEXTS]
    words = sorted({w for c in counted for w in c})
    at = {w: i for i, w in enumerate(words)}
    per = np.array([len(c) for c in counted], np.int64)
    ids = np.array([at[w] for c in counted for w in c], np.int64)
    counts = np.array([k for c in counted for k in c.values()], np.int32)
    assert (e.embed_bags(words, per, ids, counts) == e.embed(TEXTS)).all()


def test_the_digest_names_the_model_and_the_kept_components() -> None:
    a, b = WordLlamaEmbedder(128), bundled(128)
    assert a.digest() == b.digest() and a.name == b.name
    assert a.digest().startswith("wordllama-l2_supercat-256-first-128:")
    assert len({bundled(d).digest() for d in (64, 128, 256)}) == 3
    with pytest.raises(ValueError, match="components"):
        WordLlamaEmbedder(512)


class Toy:
    """A plugin embedder for the spec test: a vector per text from its length."""

    name = "toy"
    dim = 3

    def digest(self) -> str:
        return "toy:1"

    def embed(self, texts: Sequence[str]) -> Any:
        return np.array([[len(t), 1.0, 0.0] for t in texts])


def toy() -> Toy:
    return Toy()


def not_an_embedder() -> object:
    return object()


def test_specs() -> None:
    assert load_embedder("none") is None
    assert isinstance(load_embedder("wordllama"), WordLlamaEmbedder)
    got = load_embedder(f"{__name__}:toy")
    assert isinstance(got, Embedder) and got.digest() == "toy:1"
    with pytest.raises(ValueError, match="unknown embedder"):
        load_embedder("sentence-transformers")
    with pytest.raises(TypeError, match="lacks"):
        load_embedder(f"{__name__}:not_an_embedder")
    assert embedder_for("wordllama") is embedder_for("wordllama")  # loaded once


def test_offline_and_the_wordllama_module_is_never_imported() -> None:
    code = ("import sys, socket\n"
            "def no(*a, **k): raise OSError('network')\n"
            "socket.socket.connect = no\n"
            "from hivemind_memory.projections.ranking.embedders import load_embedder\n"
            "e = load_embedder('wordllama'); v = e.embed(['deploy to production'])\n"
            "assert v.shape == (1, 128) and v.any()\n"
            "assert 'wordllama' not in sys.modules\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)


def test_the_word_cache_is_bounded_and_starting_over_changes_no_bit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from hivemind_memory.projections.ranking import embedders

    texts = [f"word{i} other{i % 7} shared text number {i}" for i in range(300)] + TEXTS
    want = WordLlamaEmbedder(128).embed(texts)  # every word at once
    monkeypatch.setattr(embedders, "MAX_WORDS", 64)
    monkeypatch.setattr(embedders, "_PAIRS", 24)
    small = WordLlamaEmbedder(128)
    got = small.embed(texts)  # block by block, the cache starting over many times
    assert (got == want).all()
    assert len(small._sums) <= 64  # the bound is what is tested


def test_threads_sharing_one_embedder_get_the_vectors_one_thread_gets(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """One embedder serves every thread of a process (``embedder_for``): while one thread
    learns new words, another must never read a row the cache does not hold yet, nor one of
    a cache that started over (an embedded store's writers and its worker found an
    ``IndexError`` there). Threads switch every microsecond and the cache starts over often,
    so a read between learning a word and storing its vector is met."""
    import sys
    import threading

    from hivemind_memory.projections.ranking import embedders

    batches = [[f"t{t}w{i} t{t}x{i % 5} new{t * 1000 + i} shared words" for i in range(60)]
               for t in range(6)]
    want = [WordLlamaEmbedder(128).embed(b) for b in batches]
    monkeypatch.setattr(embedders, "MAX_WORDS", 96)
    monkeypatch.setattr(embedders, "_PAIRS", 24)
    shared = WordLlamaEmbedder(128)
    got: list[Any] = [None] * len(batches)
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for _ in range(4):
                got[t] = shared.embed(batches[t])
                assert (got[t] == want[t]).all()
        except BaseException as e:  # reported below
            errors.append(e)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(t,)) for t in range(len(batches))]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    assert all((g == w).all() for g, w in zip(got, want, strict=True))


def test_learning_a_few_words_at_a_time_does_not_copy_the_cache_each_time() -> None:
    """A worker embeds each query's few new words after a snapshot load (the index's words
    were never learnt): the word cache grows by doubling, so 600 words learnt three at a time
    replace its arrays a handful of times, not 200, and give the vectors learning them at
    once gives."""
    texts = [f"qa{i} qb{i} qc{i}" for i in range(200)]
    want = WordLlamaEmbedder(128).embed(texts)
    emb = WordLlamaEmbedder(128)
    replaced, seen = 0, id(emb._sums)
    rows = []
    for t in texts:
        rows.append(emb.embed([t])[0])
        if id(emb._sums) != seen:
            replaced, seen = replaced + 1, id(emb._sums)
    assert (np.array(rows) == want).all()
    assert 1 <= replaced <= 12
