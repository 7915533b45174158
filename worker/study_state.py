"""Per-study running state for the persistent consumer: slides done, sequence gaps and reordering, cumulative areas."""
from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, field
from typing import Any


def slide_metrics(summary: dict[str, Any]) -> dict[str, Any]:
    """Pick the numbers the consumer reports from a process_slide summary: tiles, tissue %, areas in µm².

    Returns `tiles_seen` (int or None), `tissue_percent` (float or None), `tissue_area_um2` (float or None) and
    `class_areas_um2` ({class: µm²} without the background class, index 0 of `classes`). A missing key gives None
    or {} rather than an error, so a summary from another pipeline version never stops the queue.
    """
    def number(v: Any) -> float | None:
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    classes = summary.get("classes")
    background = classes[0] if isinstance(classes, list) and classes else "background"
    areas = summary.get("class_area_um2")
    class_areas = {str(k): number(v) for k, v in areas.items() if k != background and number(v) is not None} \
        if isinstance(areas, dict) else {}
    fraction = number(summary.get("tissue_fraction"))
    tiles = summary.get("tiles_seen")
    return {"tiles_seen": tiles if isinstance(tiles, int) else None,
            "tissue_percent": None if fraction is None else 100.0 * fraction,
            "tissue_area_um2": number(summary.get("tissue_area_um2")),
            "class_areas_um2": class_areas}


@dataclass
class StudyState:
    """What the service consumer has seen of one study (one FIFO message group), carried from slide to slide."""

    study: str
    """The study name (the message's `study`, else its MessageGroupId)."""
    slides_done: int = 0
    """Slides of this study finished and committed by this consumer process."""
    slides_dead_lettered: int = 0
    """Slides of this study sent to the dead-letter queue as permanently bad."""
    last_sequence: int | None = None
    """The highest `sequence` seen so far (None until a message carries one)."""
    gaps: list[list[int]] = field(default_factory=list)
    """Missing sequence ranges [first, last] (inclusive) detected when a later sequence arrived first."""
    out_of_order: list[int] = field(default_factory=list)
    """Sequences that arrived at or below `last_sequence` (reordered or repeated)."""
    tissue_area_um2: float = 0.0
    """Cumulative tissue area over the study's finished slides, in µm²."""
    class_areas_um2: dict[str, float] = field(default_factory=dict)
    """Cumulative area per class over the study's finished slides, in µm²."""
    slide_ids: list[str] = field(default_factory=list)
    """slide_ids in the order this consumer finished them (the last 1000)."""
    updated_at: float | None = None
    """Unix time of the last update, in seconds."""

    def check_sequence(self, sequence: int | None) -> str:
        """Compare an arriving sequence with what came before: 'ok', 'none', 'gap 3-4' or 'out-of-order 2<=5'."""
        if sequence is None:
            return "none"
        if self.last_sequence is None or sequence == self.last_sequence + 1:
            return "ok"
        if sequence > self.last_sequence + 1:
            return f"gap {self.last_sequence + 1}-{sequence - 1}"
        return f"out-of-order {sequence}<={self.last_sequence}"

    def after(self, slide_id: str, sequence: int | None, metrics: dict[str, Any] | None) -> StudyState:
        """A copy updated with one more slide: finished (metrics given) or dead-lettered (metrics None)."""
        new = copy.deepcopy(self)
        if sequence is not None:
            if new.last_sequence is not None and sequence > new.last_sequence + 1:
                new.gaps.append([new.last_sequence + 1, sequence - 1])
            elif new.last_sequence is not None and sequence <= new.last_sequence:
                new.out_of_order.append(sequence)
            new.last_sequence = sequence if new.last_sequence is None else max(new.last_sequence, sequence)
        if metrics is None:
            new.slides_dead_lettered += 1
        else:
            new.slides_done += 1
            new.slide_ids = (new.slide_ids + [slide_id])[-1000:]
            if metrics.get("tissue_area_um2") is not None:
                new.tissue_area_um2 += float(metrics["tissue_area_um2"])
            for name, area in (metrics.get("class_areas_um2") or {}).items():
                new.class_areas_um2[name] = new.class_areas_um2.get(name, 0.0) + float(area)
        new.updated_at = time.time()
        return new

    def to_dict(self) -> dict[str, Any]:
        """The state as a JSON-ready dict (written into each summary under `study_state`)."""
        return asdict(self)
