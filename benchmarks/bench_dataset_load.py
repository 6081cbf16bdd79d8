"""How long a ShareGPT dataset takes to load, and its peak memory, against its number of records.

Writes a synthetic dataset with the shape of the public ShareGPT_V3 dump (one
indented JSON array of ``{"id", "conversations": [{"from", "value"}]}``, 1 to
4 human/gpt exchanges a record, 5 to 80 words a human turn and 20 to 250 a gpt
turn; 100,000 records are ~210 MB; fixed seed) in a temporary folder, and a
profile whose scenario reads it (``max_tokens = "dataset"``), then, in a fresh
process per measurement:

- ``load s``: ``load_profile`` (reading the file, parsing and checking every
  record, the filters, the pool and its encoded bodies), wall time; ``cpu s``:
  the same in CPU time of the process;
- ``base MB``: peak RSS after importing hopbench (before the load);
- ``load MB``: peak RSS after the load (``ru_maxrss``: the high-water mark, so
  it counts the file's bytes, its text and the parsed records while they lived).

    .venv/bin/python benchmarks/bench_dataset_load.py                          # 100,000 records
    .venv/bin/python benchmarks/bench_dataset_load.py --records 20000 --repeat 3
    .venv/bin/python benchmarks/bench_dataset_load.py --against main --repeat 2

``--against REV`` checks REV out in a temporary git worktree and measures it
and this tree in turn on the same file (REV, this, this, REV, ...: each
measurement its own process, the load average printed before it), so both
sides of a ratio see the same machine. ``--gzip`` compresses the file first
(``.json.gz``; a revision that cannot read gzip fails); ``--jsonl`` writes one
compact record per line instead of the array.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import random
import tempfile
import time
from pathlib import Path

from _load_bench import load_timed, measure_sides
_WORDS = ("the and for you are not but can was one all any has her how man new now old see two way who did its "
          "let put say she too use").split()


def write_dataset(path: Path, records: int, seed: int = 1, jsonl: bool = False) -> None:
    """A ShareGPT_V3-shaped JSON array of ``records`` records at ``path`` (indent 2, as the dump;
    ``jsonl``: one compact record per line instead),
    written a record at a time: the measuring children inherit this process's peak RSS
    (``ru_maxrss`` survives fork and exec), so it must stay small."""
    rng = random.Random(seed)

    def text(n: int) -> str:
        return " ".join(rng.choice(_WORDS) for _ in range(n))

    with open(path, "w", encoding="utf-8") as f:
        f.write("" if jsonl else "[\n")
        for i in range(records):
            conv = []
            for _ in range(rng.randint(1, 4)):
                conv.append({"from": "human", "value": text(rng.randint(5, 80))})
                conv.append({"from": "gpt", "value": text(rng.randint(20, 250))})
            if jsonl:
                f.write(json.dumps({"id": f"bench{i}_0", "conversations": conv}) + "\n")
                continue
            rec = json.dumps({"id": f"bench{i}_0", "conversations": conv}, indent=2)
            f.write(("" if i == 0 else ",\n") + "\n".join("  " + x for x in rec.split("\n")))
        f.write("" if jsonl else "\n]\n")


def write_profile(folder: Path, dataset: Path) -> Path:
    path = folder / "dataset.toml"
    path.write_text('[run]\nrequests = 10\nseed = 1\n[load]\nconcurrency = 1\n[target]\nurl = "http://127.0.0.1:9"\n'
                    '[[scenario]]\nname = "s"\nprotocol = "chat"\nmodel = "m"\nmax_tokens = "dataset"\n'
                    f"dataset = {{ path = {json.dumps(str(dataset))} }}\n", encoding="utf-8")
    return path


def child(profile: Path) -> dict[str, float]:
    """One measurement in this (fresh) process: the ``hopbench`` on ``sys.path`` loads ``profile``."""
    prof, figures = load_timed(profile)
    return {"entries": len(prof.scenarios[0].bodies), **figures}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000, help="records (default 100,000)")
    ap.add_argument("--repeat", type=int, default=1, help="measurements per side (default 1)")
    ap.add_argument("--gzip", action="store_true", help="measure the file gzip-compressed (.json.gz)")
    ap.add_argument("--jsonl", action="store_true", help="one record per line (JSONL) instead of a JSON array")
    ap.add_argument("--against", metavar="REV",
                    help="also measure git revision REV (a temporary worktree), interleaved")
    args = ap.parse_args()
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hopbench-dataset-load-")))
        data = tmp / ("sharegpt.jsonl" if args.jsonl else "sharegpt.json")
        t0 = time.perf_counter()
        write_dataset(data, args.records, jsonl=args.jsonl)
        size = data.stat().st_size
        if args.gzip:
            packed = tmp / "sharegpt.json.gz"
            with open(data, "rb") as src, gzip.open(packed, "wb", compresslevel=6) as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            data.unlink()
            data = packed
        print(f"dataset: {args.records:,} records, {size / 1e6:.1f} MB"
              + (f" ({data.stat().st_size / 1e6:.1f} MB gzip)" if args.gzip else "")
              + f" (written in {time.perf_counter() - t0:.1f} s)", flush=True)
        prof = write_profile(tmp, data)
        measure_sides(stack, tmp, "bench_dataset_load", prof, args.against, args.repeat,
                      f"{'side':>12} {'load avg':>16} {'records':>8} {'load s':>7} {'cpu s':>6} {'base MB':>7} "
                      f"{'load MB':>7}",
                      lambda name, load, r: f"{name:>12} {load:>16} {r['entries']:8,.0f} {r['load_s']:7.2f} "
                                            f"{r['load_cpu_s']:6.2f} {r['base_mb']:7.0f} {r['load_mb']:7.0f}")

if __name__ == "__main__":
    main()
