"""The target fingerprint (``engines/helpers/weightprint.py``): from the weights, not the path; cheap
whatever the checkpoint's size; kept by size, mtime and inode; a file replaced in place is read again."""

from __future__ import annotations

import asyncio
import os
import shutil
import struct
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from servelab.engines.helpers import weightprint
from servelab.engines.hosts.hostsfile import HostConfig
from servelab.engines.hosts.registry import close_all, open_host
from servelab.engines.weights.fingerprint import target_identity
from servelab.engines.adapters.exchange import TargetIdentity
from servelab.engines.hosts.owner import me
from tests.fixtures.targets import make


def fp(folder: Path) -> dict[str, object]:
    return weightprint.fingerprint(str(folder))


def test_the_fingerprint_is_the_weights_not_the_path(tmp_path: Path) -> None:
    a = make(tmp_path / "a", seed=1)
    copy = shutil.copytree(a, tmp_path / "elsewhere" / "copy")
    other = make(tmp_path / "b", seed=2)
    assert fp(a)["fingerprint"] == fp(copy)["fingerprint"]
    ta, tb = TargetIdentity.of(fp(a)), TargetIdentity.of(fp(other))
    assert ta is not None and tb is not None and ta.fingerprint != tb.fingerprint
    assert tb.differs(ta) == ["weights"]
    assert tb.change(ta) == "same architecture (tensor names, shapes, dtypes), config.json, tokenizer; other weights"
    retok = TargetIdentity.of(fp(make(tmp_path / "c", seed=1, tokenizer="tok-b")))
    assert retok is not None and retok.differs(ta) == ["tokenizer"]
    wider = TargetIdentity.of(fp(make(tmp_path / "d", seed=1, width=32)))
    assert wider is not None and "layout" in wider.differs(ta)


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 12), st.integers(2, 16), st.sampled_from([16, 64, 128]))
def test_what_it_reads_does_not_grow_with_the_weights(shards: int, layers: int, width: int) -> None:
    """At most the headers of SAMPLED_SHARDS shards, 8 bytes of the others, two slices of
    SAMPLED_TENSORS tensors and the small files, whatever the shards hold."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        folder = make(Path(d) / "t", seed=3, shards=min(shards, layers + 2), layers=layers, width=width)
        files = sorted(p for p in folder.iterdir() if p.suffix == ".safetensors")
        header_bytes = sorted((struct.unpack("<Q", p.read_bytes()[:8])[0] + 8 for p in files), reverse=True)
        small = sum(p.stat().st_size for p in folder.iterdir() if p.suffix != ".safetensors")
        bound = sum(header_bytes[:weightprint.SAMPLED_SHARDS]) + 8 * len(files) + 2 * weightprint.SLICE * weightprint.SAMPLED_TENSORS + small
        got = fp(folder)
        assert int(got["bytes_read"]) <= bound  # type: ignore[call-overload]
        total = sum(p.stat().st_size for p in folder.iterdir())
        if width >= 128 and layers >= 8:
            assert int(got["bytes_read"]) < total / 2  # type: ignore[call-overload]


def test_the_cache_answers_by_size_mtime_and_inode(tmp_path: Path) -> None:
    a = make(tmp_path / "a", seed=1)
    cache = str(tmp_path / "cache.json")
    first = weightprint.cached_fingerprint(str(a), cache)
    again = weightprint.cached_fingerprint(str(a), cache)
    assert not first["cached"] and again["cached"] and again["bytes_read"] == 0 and again["fingerprint"] == first["fingerprint"]
    # the target upgraded in place: same names, same sizes, other weights (a new file over the old)
    b = make(tmp_path / "b", seed=2)
    for p in b.iterdir():
        tmp = a / (p.name + ".new")
        shutil.copyfile(p, tmp)
        os.replace(tmp, a / p.name)
    swapped = weightprint.cached_fingerprint(str(a), cache)
    assert not swapped["cached"] and swapped["fingerprint"] == fp(b)["fingerprint"] != first["fingerprint"]


def test_through_the_host_a_folder_that_is_no_checkpoint_is_none(tmp_path: Path) -> None:
    a = make(tmp_path / "a", seed=1)
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "model.safetensors").write_bytes(b"\xff" * 16)

    async def go() -> list[TargetIdentity | None]:
        host = open_host(HostConfig(name="local", workdir=str(tmp_path / "work")))
        try:
            return [await target_identity(host, os.environ.get("PYTHON", "python3"), str(p))
                    for p in (a, tmp_path / "empty", tmp_path / "bad", tmp_path / "missing")]
        finally:
            await close_all()

    got = asyncio.run(go())
    assert got[0] is not None and got[0].fingerprint == fp(a)["fingerprint"]
    assert got[1:] == [None, None, None]
    assert (tmp_path / "work" / ".servelab" / me().user / "weightprint-cache.json").exists()


def test_the_drafter_check_compares_the_training_record_with_the_served_target(tmp_path: Path) -> None:
    """The record as envs/tiny/build.py writes it (model card base_model, training_args.json with the
    target's fingerprint): the trained-for target passes at any path; other weights at the same
    path, or a new one, are a warning naming both fingerprints."""
    from servelab.engines.diagnosis.identity import provenance_of
    from servelab.engines.drafter.run import provenance_findings

    target = make(tmp_path / "m" / "target", seed=1)
    head = tmp_path / "m" / "eagle3"
    head.mkdir()
    (head / "README.md").write_text("---\nbase_model: ../target\n---\n")
    trained_for = str(fp(target)["fingerprint"])
    (head / "training_args.json").write_text('{"target_model_path": "../target", "target_fingerprint": "%s"}' % trained_for)
    copy = shutil.copytree(target, tmp_path / "copy" / "target")
    variant = make(tmp_path / "m" / "target-variant", seed=2)
    python = os.environ.get("PYTHON", "python3")

    async def go() -> list[object]:
        host = open_host(HostConfig(name="local", workdir=str(tmp_path / "work")))
        try:
            out: list[object] = [await provenance_findings(host, python, str(head), str(p), "llama") for p in (target, copy, variant)]
            for p in target, variant:
                out.append(await provenance_of(host, python, str(head), str(p), await target_identity(host, python, str(p))))
            for p in variant.iterdir():  # the variant swapped in place over the trained-for target
                shutil.copyfile(p, target / (p.name + ".new"))
                os.replace(target / (p.name + ".new"), target / p.name)
            out.append(await provenance_findings(host, python, str(head), str(target), "llama"))
            return out
        finally:
            await close_all()

    same, moved, other, prov_same, prov_other, in_place = asyncio.run(go())
    assert same == [] and moved == []
    assert isinstance(other, list) and [f.code for f in other] == ["target-provenance-mismatch"] and other[0].severity == "warning"
    assert trained_for in other[0].evidence and str(fp(variant)["fingerprint"]) in other[0].evidence
    assert isinstance(in_place, list) and [f.code for f in in_place] == ["target-provenance-mismatch"]
    assert getattr(prov_same, "matches") is True and getattr(prov_other, "matches") is False
