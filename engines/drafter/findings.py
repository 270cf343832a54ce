"""One finding of the drafter checks, and the stable codes (documented in docs/drafters.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

Severity = Literal["error", "warning", "info"]

#: Every code the checks can emit, with its meaning. The codes are stable: scripts match on them.
CODES: dict[str, str] = {
    "vocab-map-missing": "draft_vocab_size is below the target vocab and the weights hold no d2t map",
    "vocab-map-out-of-range": "some i + d2t[i] falls outside the target vocab (or d2t holds ids, not offsets)",
    "target-vocab-mismatch": "the drafter's vocab_size is not the target's",
    "hidden-size-mismatch": "the drafter's hidden size is not the target's, so the fused aux states cannot fit",
    "aux-layers-out-of-range": "an aux hidden-state layer id is not a layer of the target",
    "aux-layers-convention": "the layers the engine taps: a warning only where it taps other ones than the ids say (an offset convention); the drafter's own ids or the default, a note",
    "special-tokens-mismatch": "bos/eos/pad ids of the drafter and the target differ",
    "architecture-unsupported": "this engine version does not accept the drafter architecture, or the target for this method",
    "method-architecture-mismatch": "an EAGLE-3 drafter under method eagle, or the reverse",
    "context-too-short": "the drafter's max positions are below the experiment's max model length",
    "norm-flags-ignored": "drafter config flags this engine version does not read",
    "path-overrides-method": "the engine infers the method from the drafter's path, and this path triggers it",
    "drafter-unreadable": "a drafter or target file that should be there cannot be read",
    "config-weights-mismatch": "the drafter's config says one shape, its weights another (both named)",
    "mtp-unsupported": "the engine maps the target's model type to no MTP model it accepts",
    "mtp-layers-missing": "the target's config records no MTP layer (num_nextn_predict_layers or its variant is 0 or absent)",
    "mtp-weights-missing": "the MTP layers the config records have no tensors in the checkpoint",
    "num-tokens-mismatch": "the tokens drafted per step do not fit what the drafter records (MTP layers, trained depth)",
    "target-provenance-mismatch": "the drafter's training record (model card base_model, training args, a recorded target fingerprint) names another target",
}


@dataclass(frozen=True)
class Finding:
    """One line: what is wrong, the evidence read on the host, and the setting to change."""

    code: str
    severity: Severity
    message: str
    evidence: str
    fix: str

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise ValueError(f"unknown finding code {self.code!r}")

    def line(self) -> str:
        return f"{self.severity.upper():<7} {self.code}: {self.message}"

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def blocking(findings: list[Finding], allow: list[str] | tuple[str, ...] = ()) -> list[Finding]:
    """The errors that stop a launch: every error whose code the experiment does not allow."""
    return [f for f in findings if f.severity == "error" and f.code not in allow]
