"""Build the trained tiny target, its drafters and the planted-cause variants.

    python envs/tiny/build.py OUT_DIR [--variants]

Run with the engine environment's interpreter (torch, transformers, tokenizers, safetensors).
Writes, atomically (a half-built folder never looks complete):

- ``target/``: a 4-layer Llama and its byte-level BPE, trained on the pinned stdlib slice;
- ``eagle3/``: an EAGLE-3 head trained on the target's own continuations (training-time test,
  pruned draft vocabulary with ``d2t``/``t2d``);
- ``draft/``: a 2-layer draft model trained on the same continuations;
- with ``--variants``, ``variants/<cause>/``: heads with exactly one planted cause each
  (``under-trained``, ``raw-only``, ``code-only``, ``aux-shifted``, ``no-d2t``, ``aux-norm``);
  temperature and K are serving settings and live in the experiments, not here; and
  ``target-variant/``: a second target, the same architecture, tokenizer and templates, other
  weights (another seed, VARIANT_TARGET_STEPS steps: cheap), to serve the heads on a target they
  were not trained for;
- beside every drafter, its training record as real drafters keep it: a model card (``README.md``,
  ``base_model``) and ``training_args.json`` (SpecForge's ``target_model_path``, and the target's
  fingerprint as ``servelab drafter`` computes it, ``target_fingerprint``);
- ``build.json``: what was built, from what, how long each part took, and the offline per-position
  acceptance of each head on the target's greedy output.

Everything is drawn from fixed seeds on a fixed number of threads: the same machine type writes
the same files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent.parent / "engines"), str(HERE.parent.parent / "engines" / "helpers")]

import torch  # noqa: E402

import corpus  # noqa: E402
import data  # noqa: E402
import draft as draft_mod  # noqa: E402
import eagle3  # noqa: E402
import evaluate  # noqa: E402
import target as target_mod  # noqa: E402
import weightprint  # noqa: E402  (stdlib: the target fingerprint servelab computes on a host)

SEED = 20261
#: The aux layers the heads are trained on (id j: the residual stream after j of the 4 layers).
AUX_IDS = (1, 2, 3)
#: What the aux-shifted variant's config claims instead.
SHIFTED_AUX_IDS = (0, 1, 2)
HEAD_STEPS = 300
#: The second target's steps and seed: only its weights need to differ (a third of the target's cost).
VARIANT_TARGET_STEPS = 150
VARIANT_TARGET_SEED = SEED + 50
UNDER_TRAINED_STEPS = 25
DRAFT_STEPS = 300
#: Openings continued by the target, per (domain, form).
SELF_DATA = 96
#: Offline acceptance is read on this many continuations of each domain and form.
EVAL_PROMPTS = 4


def log(msg: str) -> None:
    print(msg, flush=True)


def record_training(folder: Path, target: Path, **args: Any) -> None:
    """The drafter's training record, in the places real drafters keep it: the model card's
    ``base_model`` and the training arguments beside the weights (``drafter/provenance.py`` reads them)."""
    fp = weightprint.fingerprint(str(target))["fingerprint"]
    rel = os.path.relpath(target, folder)
    (folder / "README.md").write_text(f"---\nbase_model: {rel}\nlibrary_name: servelab-tiny\n---\n\n"
                                      f"A drafter for the tiny target ({rel}), trained by envs/tiny/build.py.\n")
    record = {"target_model_path": rel, "target_fingerprint": fp, **args}
    (folder / "training_args.json").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


def _save_llama(folder: Path, model: Any, tok: Any, greedy: bool) -> None:
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    if greedy:  # the served default: greedy, as the probe's temperature-0 arms are
        gen = {"bos_token_id": tok.bos_token_id, "eos_token_id": tok.eos_token_id, "pad_token_id": tok.pad_token_id,
               "do_sample": False, "temperature": 0.0}
        (folder / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")


#: Probe prompts per domain, written beside the target as ``prompts.jsonl`` (categories prose, code).
PROMPTS_PER_DOMAIN = 4


def probe_prompts(c: corpus.Corpus) -> list[dict[str, Any]]:
    """Openings of paragraphs the target learned (every fifth long one): it continues them as text."""
    rows: list[dict[str, Any]] = []
    kinds = {"prose": lambda p: not p.startswith((" ", "*", "#")), "code": lambda p: "def " in p or "return " in p}
    for domain, texts in (("prose", c.prose), ("code", c.code)):
        paras = [p for t in texts for p in data.paragraphs(t) if len(p) > 120 and kinds[domain](p)][1::5][:PROMPTS_PER_DOMAIN]
        for i, p in enumerate(paras):
            rows.append({"question_id": f"{domain}-{i + 1}", "category": domain, "turns": [p[:160].rsplit(" ", 1)[0]]})
    return rows


def _eval_seqs(model: Any, tok: Any, st: target_mod.Streams) -> dict[str, list[tuple[int, list[int]]]]:
    """Per (domain, form): greedy continuations of openings the training did not draw from first."""
    out: dict[str, list[tuple[int, list[int]]]] = {}
    for (domain, form), ids in sorted(st.ids.items()):
        g = torch.Generator().manual_seed(SEED + 7)
        seqs = []
        for _ in range(EVAL_PROMPTS):
            start = int(torch.randint(0, len(ids) - 40, (1,), generator=g))
            prompt = [int(x) for x in ids[start : start + 24]]
            seqs.append((len(prompt), evaluate.continuation(model, prompt, 48)))
        out[f"{domain}/{form}"] = seqs
    return out


def _load_head(weights: dict[str, torch.Tensor], shape: eagle3.HeadShape, aux_norm: bool) -> eagle3.Head:
    head = eagle3.Head(shape, aux_norm)
    rename = {"fc.weight": "fc.weight", "lm_head.weight": "lm_head.weight", "norm.weight": "norm"}
    sd = {}
    for k, v in weights.items():
        if k in ("d2t", "t2d"):
            continue
        if k in rename:
            sd[rename[k]] = v
        else:
            part = k.split(".")[-2]
            sd[part if "norm" in part else part + ".weight"] = v
    head.load_state_dict(sd)
    return head


def build(out: Path, variants: bool) -> dict[str, Any]:
    torch.set_num_threads(2)
    torch.manual_seed(SEED)
    times: dict[str, float] = {}
    t = time.monotonic()
    full = corpus.load()
    c = corpus.sliced(full)
    tok = target_mod.build_tokenizer(c)
    st = target_mod.streams(tok, c, SEED)
    times["corpus+tokenizer"] = time.monotonic() - t

    t = time.monotonic()
    log(f"target: {target_mod.STEPS} steps on {sum(len(v) for v in st.ids.values())} tokens")
    model = target_mod.train_llama(tok, target_mod.ARCH, st.pick(("prose", "code"), ("raw", "chat")), target_mod.STEPS, SEED, log=log)
    _save_llama(out / "target", model, tok, greedy=True)
    (out / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in probe_prompts(c)))
    times["target"] = time.monotonic() - t
    tcfg = json.loads((out / "target" / "config.json").read_text())

    t = time.monotonic()
    everything = st.pick(("prose", "code"), ("raw", "chat"))
    vocab = eagle3.draft_vocab(torch.bincount(torch.cat(everything), minlength=len(tok)))
    # One generation pass, SELF_DATA openings from each (domain, form); each drafter reads its subset.
    gen = {key: eagle3.self_data(model, [ids], SELF_DATA, SEED + 1 + i)[0] for i, (key, ids) in enumerate(sorted(st.ids.items()))}
    data = {
        "all": [gen[k] for k in sorted(gen)],
        "raw": [gen[k] for k in sorted(gen) if k[1] == "raw"],
        "code": [gen[k] for k in sorted(gen) if k[0] == "code"],
    }
    times["self-data"] = time.monotonic() - t

    heads: dict[str, tuple[dict[str, torch.Tensor], bool]] = {}
    t = time.monotonic()
    log(f"eagle3 head: {HEAD_STEPS} steps, TTT {eagle3.TTT}, aux ids {list(AUX_IDS)}, draft vocab {len(vocab)}")
    good, under = eagle3.train(model, data["all"], vocab, eagle3.TrainSpec(HEAD_STEPS, SEED + 2, AUX_IDS, snapshot_at=UNDER_TRAINED_STEPS), log=log)
    eagle3.write(out / "eagle3", eagle3.config(tcfg, AUX_IDS, len(vocab)), good)
    record_training(out / "eagle3", out / "target", steps=HEAD_STEPS, seed=SEED + 2, data="all")
    heads["eagle3"] = (good, False)
    times["eagle3"] = time.monotonic() - t

    t = time.monotonic()
    log(f"draft model: {DRAFT_STEPS} steps")
    dm = draft_mod.train(tok, data["all"], DRAFT_STEPS, SEED + 3, log=log)
    _save_llama(out / "draft", dm, tok, greedy=True)
    record_training(out / "draft", out / "target", steps=DRAFT_STEPS, seed=SEED + 3, data="all")
    times["draft"] = time.monotonic() - t

    if variants:
        v = out / "variants"
        assert under is not None
        eagle3.write(v / "under-trained", eagle3.config(tcfg, AUX_IDS, len(vocab)), under)
        record_training(v / "under-trained", out / "target", steps=UNDER_TRAINED_STEPS, seed=SEED + 2, data="all")
        heads["under-trained"] = (under, False)
        for name, part, aux_norm in (("raw-only", "raw", False), ("code-only", "code", False), ("aux-norm", "all", True)):
            t = time.monotonic()
            log(f"variant {name}")
            w, _ = eagle3.train(model, data[part], vocab, eagle3.TrainSpec(HEAD_STEPS, SEED + 2, AUX_IDS, aux_norm=aux_norm), log=log)
            extra = {"use_aux_norm": True} if aux_norm else None
            eagle3.write(v / name, eagle3.config(tcfg, AUX_IDS, len(vocab), extra), w)
            record_training(v / name, out / "target", steps=HEAD_STEPS, seed=SEED + 2, data=part)
            heads[name] = (w, aux_norm)
            times[name] = time.monotonic() - t
        eagle3.write(v / "aux-shifted", eagle3.config(tcfg, SHIFTED_AUX_IDS, len(vocab)), good)
        eagle3.write(v / "no-d2t", eagle3.config(tcfg, AUX_IDS, len(vocab)), {k: x for k, x in good.items() if k not in ("d2t", "t2d")})
        for name in ("aux-shifted", "no-d2t"):
            record_training(v / name, out / "target", steps=HEAD_STEPS, seed=SEED + 2, data="all")
        t = time.monotonic()
        log(f"target variant: {VARIANT_TARGET_STEPS} steps, seed {VARIANT_TARGET_SEED} (same architecture and tokenizer, other weights)")
        other = target_mod.train_llama(tok, target_mod.ARCH, st.pick(("prose", "code"), ("raw", "chat")), VARIANT_TARGET_STEPS,
                                       VARIANT_TARGET_SEED, log=log)
        _save_llama(out / "target-variant", other, tok, greedy=True)
        times["target-variant"] = time.monotonic() - t

    t = time.monotonic()
    cfg = model.config
    shape = eagle3.HeadShape(cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
                             cfg.intermediate_size, len(AUX_IDS), len(vocab), cfg.rms_norm_eps, float(getattr(cfg, "rope_theta", 10000.0)))
    seqs = _eval_seqs(model, tok, st)
    offline: dict[str, dict[str, list[float]]] = {}
    for name, (w, aux_norm) in heads.items():
        head = _load_head(w, shape, aux_norm)
        offline[name] = {k: [round(x, 3) for x in evaluate.per_position(model, head, vocab, AUX_IDS, s, 3)] for k, s in seqs.items()}
    times["offline-acceptance"] = time.monotonic() - t
    return {"corpus": {"digest": full.digest, "prose_texts": len(c.prose), "code_texts": len(c.code),
                       "tokens": {f"{d}/{f}": len(x) for (d, f), x in sorted(st.ids.items())}},
            "seconds": {k: round(x, 1) for k, x in times.items()}, "offline_per_position": offline,
            "aux_ids": list(AUX_IDS), "draft_vocab": len(vocab)}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="build.py", description="train the tiny target, its drafters and the planted variants")
    p.add_argument("out_dir")
    p.add_argument("--variants", action="store_true", help="also build the planted-cause variants (make test)")
    args = p.parse_args(argv)
    out = Path(args.out_dir).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tiny-trained-", dir=out.parent))
    t0 = time.monotonic()
    try:
        try:
            report = build(staging, args.variants)
        except corpus.CorpusMismatch as e:
            print(f"build.py: {e}", file=sys.stderr)
            return 2
        report["seconds"]["total"] = round(time.monotonic() - t0, 1)
        report["variants"] = args.variants
        (staging / "build.json").write_text(json.dumps(report, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        staging.chmod(0o755)
        os.replace(staging, out)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    log(f"built {out} in {report['seconds']['total']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
