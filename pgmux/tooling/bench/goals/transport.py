"""The transport: the reader and decoders over recorded backend byte streams
(``pgmux.tooling.bench.micro``), how many copies of a 1 MiB field are alive at once and
what the read buffers keep after a result."""

from __future__ import annotations

from pgmux.tooling.bench.goals.common import Area, Goal, Run, line, not_measured

COPIES = 2
RETAINED = 256 * 1024


def size(count: int) -> str:
    if count >= 1024 * 1024:
        return f"{count / 1048576:.2f} MiB"
    return f"{count / 1024:.1f} KiB" if count >= 1024 else f"{count} B"


def judge(run: Run) -> list[Goal]:
    copies_text = f"a 1 MiB field decoded with <= {COPIES} copies of the payload alive at once"
    retained_text = f"read buffers retained after a result <= {size(RETAINED)}"
    if not run.micro:
        why = "run the micro-benchmarks (--micro, or the default preset)"
        return [not_measured("field_copies", copies_text, why),
                not_measured("retained_buffers", retained_text, why)]
    fields = [m for m in run.micro if m.get("payload_copies") is not None]
    out = []
    if not fields:
        out.append(not_measured("field_copies", copies_text, "no field stream measured"))
    else:
        worst = max(fields, key=lambda m: m["peak_over_payload"])
        out.append(line("field_copies", copies_text, worst["payload_copies"] <= COPIES,
                        f"{worst['payload_copies']} (peak {worst['peak_over_payload']:.2f}x the "
                        f"payload, {worst['stream']} {worst['mode']})",
                        "whole payloads alive at the tracemalloc peak: " + ", ".join(
                            f"{m['stream']}/{m['mode']} {m['payload_copies']}" for m in fields)))
    retained = max(run.micro, key=lambda m: m["retained_buffer_bytes"])
    out.append(line("retained_buffers", retained_text,
                    retained["retained_buffer_bytes"] <= RETAINED,
                    size(retained["retained_buffer_bytes"]) + " (largest)"))
    return out


AREA = Area("transport", "transport", judge, extra=lambda run: bool(run.micro))
