"""The demo's knobs (kept apart from the demo so the command line can show the defaults cheaply)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from controller.model.textfmt import duration


@dataclass(frozen=True)
class DemoOptions:
    """The demo's knobs; the defaults make the run docs/demo.md times (test_docs.py checks its figures)."""

    burst: int = 160
    burst_at: float = 5.0  # seconds after the rule starts
    second_burst: int = 60  # 0: none
    second_burst_at: float = 50.0
    work_time: float = 1.0  # seconds of work per message
    polling_interval: float = 2.0
    max_workers: int = 8
    target_per_replica: float = 20.0
    scale_down_delay: float = 10.0
    scale_to_zero_delay: float = 15.0
    max_duration: float = 180.0  # after this the demo stops anyway (and exits 1)
    out_dir: Path = Path("queuescale-demo")
    live: bool | None = None  # None: redraw in place when stdout is a terminal

    def problems(self) -> list[str]:
        """Option errors, each naming the option."""
        found = []
        if self.burst < 1:
            found.append(f"--burst: must be >= 1, got {self.burst}")
        if self.second_burst < 0:
            found.append(f"--second-burst: must be >= 0, got {self.second_burst}")
        if self.second_burst and self.second_burst_at <= self.burst_at:
            found.append(f"--second-burst-at: must be after --burst-at ({duration(self.burst_at)}), "
                         f"got {duration(self.second_burst_at)}")
        if self.work_time < 0:
            found.append(f"--work-time: must be >= 0, got {self.work_time:g}")
        if self.polling_interval < 1:
            found.append(f"--polling-interval: must be >= 1s, got {self.polling_interval:g}")
        if not 1 <= self.max_workers <= 64:
            found.append(f"--max-workers: must be 1 to 64, got {self.max_workers}")
        if self.target_per_replica <= 0:
            found.append(f"--target-per-replica: must be > 0, got {self.target_per_replica:g}")
        if self.max_duration <= self.burst_at:
            found.append(f"--max-duration: must be after --burst-at ({duration(self.burst_at)}), got "
                         f"{duration(self.max_duration)}")
        return found
