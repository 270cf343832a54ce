"""SGLang adapter: command line, log grammar, metrics reading and argument validation for SGLang.

The server is started as ``python -m sglang.launch_server``. Speculative decoding uses SGLang's
flat flags (``--speculative-algorithm EAGLE3``, ``--speculative-num-steps`` ...). On a chain
(top-k 1) servelab's ``num_tokens`` = k means k draft steps and k + 1 tokens verified per step.
"""

from __future__ import annotations

from typing import Any

from engines.adapter import Inexpressible, LaunchSpec, render_flags
from engines.experiment import Experiment

MANAGED_FLAGS: dict[str, str] = {
    "model-path": "model",
    "model": "model",
    "port": "port",
    "served-model-name": "served_model_name",
    "tp": "parallel.tensor",
    "tp-size": "parallel.tensor",
    "dp": "parallel.data",
    "dp-size": "parallel.data",
    "ep": "parallel.expert",
    "ep-size": "parallel.expert",
    "pp": "parallel.pipeline",
    "pp-size": "parallel.pipeline",
    "speculative-algorithm": "speculative.method",
    "speculative-draft-model-path": "speculative.draft_model",
    "speculative-num-steps": "speculative.num_steps",
    "speculative-eagle-topk": "speculative.eagle_topk",
    "speculative-num-draft-tokens": "speculative.num_draft_tokens",
}

#: servelab's method names to SGLang's ``--speculative-algorithm`` values.
ALGORITHMS: dict[str, str] = {
    "eagle": "EAGLE",
    "eagle3": "EAGLE3",
    "mtp": "NEXTN",
    "ngram": "NGRAM",
    "draft_model": "STANDALONE",
}


class SglangAdapter:
    """SGLang (0.4.x-0.5.x, 2025-2026)."""

    name = "sglang"
    package = "sglang"
    log_signatures = (
        "sglang.launch_server",
        "sglang.srt",
        "server_args=ServerArgs(",
        "Scheduler hit an exception",
        "[TP0]",
        "The server is fired up and ready to roll",
    )

    def problems(self, exp: Experiment) -> list[Inexpressible]:
        out: list[Inexpressible] = []
        for key in exp.engine_args:
            if key in MANAGED_FLAGS:
                out.append(Inexpressible(f"engine_args.{key}", f"set it with '{MANAGED_FLAGS[key]}'"))
        _, bad = render_flags(exp.engine_args)
        out.extend(bad)
        s = exp.speculative
        if s.method == "none":
            return out
        if s.prompt_lookup_min is not None or s.prompt_lookup_max is not None:
            out.append(
                Inexpressible(
                    "speculative.prompt_lookup_min",
                    "SGLang's NGRAM has no prompt-lookup window; put its speculative-ngram-* flags in [speculative.extra]",
                )
            )
        if s.draft_tensor_parallel is not None and s.draft_tensor_parallel != exp.parallel.tensor:
            out.append(Inexpressible("speculative.draft_tensor_parallel", "SGLang runs the drafter with the target's tensor size"))
        topk = s.eagle_topk or 1
        if topk == 1 and s.num_draft_tokens is not None and s.num_draft_tokens != self._steps(exp) + 1:
            out.append(
                Inexpressible(
                    "speculative.num_draft_tokens",
                    f"on a chain (eagle_topk 1) SGLang verifies steps + 1 = {self._steps(exp) + 1} tokens",
                )
            )
        if s.method == "ngram" and (s.num_steps is not None or s.eagle_topk is not None):
            out.append(Inexpressible("speculative.num_steps", "NGRAM takes only num_tokens (draft tokens) in SGLang"))
        for key in s.extra:
            if key.startswith("-") or key in MANAGED_FLAGS:
                out.append(Inexpressible(f"speculative.extra.{key}", "write an SGLang flag name without dashes, not one servelab sets"))
        return out

    @staticmethod
    def _steps(exp: Experiment) -> int:
        s = exp.speculative
        return s.num_steps if s.num_steps is not None else (s.num_tokens or 1)

    def speculative_flags(self, exp: Experiment, draft_model: str | None) -> list[str]:
        s = exp.speculative
        if s.method == "none":
            return []
        flags = ["--speculative-algorithm", ALGORITHMS[s.method]]
        if draft_model:
            flags += ["--speculative-draft-model-path", draft_model]
        if s.method == "ngram":
            flags += ["--speculative-num-draft-tokens", str(s.num_tokens)]
        else:
            steps = self._steps(exp)
            topk = s.eagle_topk or 1
            draft_tokens = s.num_draft_tokens if s.num_draft_tokens is not None else steps + 1
            flags += [
                "--speculative-num-steps", str(steps),
                "--speculative-eagle-topk", str(topk),
                "--speculative-num-draft-tokens", str(draft_tokens),
            ]
        extra: dict[str, Any] = {k: v for k, v in s.extra.items() if k not in MANAGED_FLAGS}
        rendered, _ = render_flags(extra)
        return flags + rendered

    def engine_flags(self, exp: Experiment, model: str, draft_model: str | None) -> list[str]:
        flags = ["--model-path", model, "--port", str(exp.port)]
        if exp.served_model_name:
            flags += ["--served-model-name", exp.served_model_name]
        p = exp.parallel
        if p.tensor > 1:
            flags += ["--tp-size", str(p.tensor)]
        if p.data > 1:
            flags += ["--dp-size", str(p.data)]
        if p.expert > 1:
            flags += ["--ep-size", str(p.expert)]
        if p.pipeline > 1:
            flags += ["--pp-size", str(p.pipeline)]
        rendered, _ = render_flags({k: v for k, v in exp.engine_args.items() if k not in MANAGED_FLAGS})
        return flags + rendered + self.speculative_flags(exp, draft_model)

    def launch_spec(self, exp: Experiment, python: str, model: str, draft_model: str | None) -> LaunchSpec:
        argv = [python, "-m", "sglang.launch_server", *self.engine_flags(exp, model, draft_model)]
        env = {"PYTHONUNBUFFERED": "1", "NO_COLOR": "1", **exp.env}
        return LaunchSpec(argv=argv, env=env)


ADAPTER = SglangAdapter()
