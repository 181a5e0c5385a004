#!/usr/bin/env python3
"""PyTorch symmetric-memory alltoallv (torch.ops.symm_mem.all_to_all_vdev, NVSHMEM) timed like alltoallv_bench.

Starts N processes itself (torch.multiprocessing, environment init on 127.0.0.1; no torchrun), runs the same sizes
and traffic as bench/alltoallv_bench.cu (uniform, and Zipf-skewed counts from the same seeded integer generator as
reference/alltoallv/traffic.h), checks every received element once per size, and writes a peerlab run file (schema
version 1) with suite "alltoallv", impl "torch.symm_mem", names "uniform" / "skewed". The skewed rows are written as
skipped: the PyTorch op asserts on the device that each peer's bytes divide evenly among the CTAs it gets. Without
torch, CUDA, enough GPUs or NVSHMEM it prints why and writes the same rows as "skipped: <why>".

    python3 bench/external/torch_symm_alltoallv.py --ranks 4 --out torch_symm.json
    python3 bench/external/torch_symm_alltoallv.py --ranks 4 --sizes 4096,65536,134217728 --out quick.json
"""

import argparse
import datetime
import json
import math
import os
import socket
import subprocess
import sys

# Multicast stays off for everything this script starts; must be set before torch (and NVSHMEM) load.
os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
os.environ["NVSHMEM_DISABLE_NVLS"] = "1"
os.environ["NCCL_NVLS_ENABLE"] = "0"

ELEM_BYTES = 4  # float32 elements, as in alltoallv_bench
DEFAULT_SIZES = [4096, 16384, 65536, 262144, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 128 << 20, 256 << 20, 1 << 30]
MASK = (1 << 64) - 1


# --- the traffic generator of reference/alltoallv/traffic.h, bit for bit -------------------------------------------
def mix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def traffic_hash(seed, call, a, b):
    return mix64(mix64(mix64(seed ^ 0x7261666669635F31) ^ call) ^ ((a << 8 | b) & MASK))


ZIPF_ONE = 1 << 24


def zipf_shares(ranks, alpha):
    w = [1.0 / math.pow(k + 1, alpha) for k in range(ranks)]
    total = sum(w)
    shares = [int(v / total * ZIPF_ONE) for v in w]
    shares[0] += ZIPF_ONE - sum(shares)
    return shares


def traffic_matrix(pattern, ranks, elements, call=0):
    """m[src][dst] in elements: "uniform" (seed 1) or "skewed" (Zipf alpha 1.2, seed 2), as alltoallv_bench."""
    if pattern == "uniform":
        return [[elements // ranks] * ranks for _ in range(ranks)]
    seed, shares = 2, zipf_shares(ranks, 1.2)
    m = []
    for s in range(ranks):
        rot = traffic_hash(seed, call, s + 1, 0) % ranks
        row = []
        for d in range(ranks):
            pos = (d + ranks - s + rot) % ranks
            row.append(elements * shares[pos] // ZIPF_ONE)
        m.append(row)
    return m


# PyTorch's all_to_all_vdev kernel asserts on the device that each peer's bytes split evenly among the CTAs it
# assigns that peer (block_size * blocks_per_peer == peer_size); skewed counts generally do not.
SKEWED_UNSUPPORTED = ("torch.ops.symm_mem.all_to_all_vdev asserts that each peer's bytes divide evenly among its "
                      "CTAs; skewed counts do not")


# --- report rows ---------------------------------------------------------------------------------------------------
def row(pattern, ranks, size, time_us=None, wrong=None, status="ok", extra=None):
    r = {"suite": "alltoallv", "name": pattern, "impl": "torch.symm_mem", "src": None, "dst": None, "ranks": ranks,
         "bytes": float(size), "time_us": time_us, "algbw_gbps": None, "busbw_gbps": None, "wrong": wrong,
         "status": status}
    if time_us:
        r["algbw_gbps"] = size / time_us / 1e3
        r["busbw_gbps"] = r["algbw_gbps"] * (ranks - 1) / ranks
    if extra:
        r.update(extra)
    return r


def git_sha():
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        return subprocess.check_output(["git", "-C", here, "rev-parse", "HEAD"], stderr=subprocess.DEVNULL,
                                       text=True).strip()
    except Exception:
        return "unknown"


def fingerprint(torch_mod=None):
    fp = {"hostname": socket.gethostname(), "driver": "unknown", "cuda_runtime": "unknown", "nccl": "unknown",
          "gpus": []}
    if torch_mod is None:
        return fp
    try:
        fp["cuda_runtime"] = str(torch_mod.version.cuda)
        v = torch_mod.cuda.nccl.version()
        fp["nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        for i in range(torch_mod.cuda.device_count()):
            p = torch_mod.cuda.get_device_properties(i)
            fp["gpus"].append({"ordinal": i, "uuid": str(getattr(p, "uuid", "")), "bus_id": "", "name": p.name})
    except Exception:
        pass
    return fp


def write_run(path, results, torch_mod=None):
    run = {"schema_version": 1, "tool": "torch_symm_alltoallv.py", "git_sha": os.environ.get("PEERLAB_GIT_SHA", git_sha()),
           "timestamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "fingerprint": fingerprint(torch_mod), "results": results}
    text = json.dumps(run, indent=2)
    if path == "-":
        print(text)
    else:
        with open(path + ".tmp", "w") as f:
            f.write(text + "\n")
        os.replace(path + ".tmp", path)
        print(f"wrote {len(results)} rows to {path}")


def skipped(args, why):
    print(f"torch_symm_alltoallv: skipped: {why}")
    rows = [row(p, args.ranks, s, status=f"skipped: {why}") for s in args.sizes for p in ("uniform", "skewed")]
    write_run(args.out, rows)
    return 0


# --- one rank ------------------------------------------------------------------------------------------------------
def plan_for(size):
    if size <= (1 << 20):
        return 20, 20, 25  # warm-up calls, calls per sample, samples (as alltoallv_bench)
    if size <= (64 << 20):
        return 5, 5, 12
    return 3, 2, 8


def rank_main(rank, ranks, port, sizes, queue):
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                       "WORLD_SIZE": str(ranks), "LOCAL_RANK": str(rank)})
    device = torch.device("cuda", rank)
    torch.cuda.set_device(device)
    rows = []
    try:
        dist.init_process_group("nccl", rank=rank, world_size=ranks, device_id=device)
        group = dist.group.WORLD.group_name
        if hasattr(symm_mem, "set_backend"):
            symm_mem.set_backend("NVSHMEM")
        if hasattr(symm_mem, "enable_symm_mem_for_group"):
            symm_mem.enable_symm_mem_for_group(group)
        op = torch.ops.symm_mem.all_to_all_vdev
        # Two signatures exist: (input, out, in_splits, out_splits_offsets, group) and the older
        # (input, out, in_out_splits[3, n], group).
        arg_names = [a.name for a in op.default._schema.arguments]
        new_api = "out_splits_offsets" in arg_names
        # The op sizes its grid from the whole input tensor and asserts that every peer's bytes divide evenly among
        # the CTAs it gets, so each size gets symmetric buffers of exactly its own totals (uniform traffic: the same
        # on every rank, as symmetric allocations must be).
        if new_api:
            in_splits = symm_mem.empty(ranks, dtype=torch.int64, device=device)
            out_so = symm_mem.empty((2, ranks), dtype=torch.int64, device=device)
            splits_tensors = [in_splits, out_so]
        else:
            in_out = symm_mem.empty((3, ranks), dtype=torch.int64, device=device)
            splits_tensors = [in_out]
        for t in splits_tensors:
            symm_mem.rendezvous(t, group)
        buffers = {}

        def call():
            inp, out = buffers["in"], buffers["out"]
            if new_api:
                op(inp, out, in_splits, out_so, group)
            else:
                op(inp, out, in_out, group)

        for size in sizes:
            for pattern in ("uniform",):
                m = traffic_matrix(pattern, ranks, size // ELEM_BYTES)
                counts = m[rank]
                buffers.clear()
                torch.cuda.synchronize()
                inp = symm_mem.empty(max(1, sum(counts)), dtype=torch.float32, device=device)
                out = symm_mem.empty(max(1, sum(m[s][rank] for s in range(ranks))), dtype=torch.float32,
                                     device=device)
                symm_mem.rendezvous(inp, group)
                symm_mem.rendezvous(out, group)
                buffers.update({"in": inp, "out": out})
                # Segment for destination d: (rank * 8 + d) * 65536 + index mod 65536, exact in float32.
                parts = [((rank * 8 + d) * 65536 + torch.arange(c, device=device) % 65536).float()
                         for d, c in enumerate(counts)]
                total_in = sum(counts)
                if total_in:
                    inp[:total_in].copy_(torch.cat(parts))
                splits = torch.tensor(counts, dtype=torch.int64, device=device)
                if new_api:
                    in_splits.copy_(splits)
                else:
                    in_out[0].copy_(splits)
                out.fill_(-1.0)
                call()
                torch.cuda.synchronize()
                recv = [m[s][rank] for s in range(ranks)]
                expect = torch.cat([((s * 8 + rank) * 65536 + torch.arange(c, device=device) % 65536).float()
                                    for s, c in enumerate(recv)])
                wrong = int((out[:expect.numel()] != expect).sum().item())
                warm, batch, samples = plan_for(size)
                for _ in range(warm):
                    call()
                torch.cuda.synchronize()
                times = []
                for _ in range(samples):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    for _ in range(batch):
                        call()
                    b.record()
                    b.synchronize()
                    times.append(1000.0 * a.elapsed_time(b) / batch)
                times.sort()
                med = times[len(times) // 2] if len(times) % 2 else 0.5 * (times[len(times) // 2 - 1] + times[len(times) // 2])
                rows.append((pattern, size, med, wrong))
        queue.put((rank, rows, None))
    except Exception as e:  # report the reason instead of a hung job
        queue.put((rank, rows, f"{type(e).__name__}: {e}"))
    finally:
        try:
            dist.destroy_process_group()
        except Exception:
            pass


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--sizes", default=",".join(str(s) for s in DEFAULT_SIZES), help="bytes per rank, comma separated")
    ap.add_argument("--out", default="-", help="run file to write (- for stdout)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds for the whole job")
    args = ap.parse_args()
    try:
        args.sizes = [int(s) for s in args.sizes.split(",") if s]
    except ValueError:
        print(f"torch_symm_alltoallv: bad --sizes '{args.sizes}'", file=sys.stderr)
        return 2
    if args.ranks < 2 or args.ranks > 8:
        print("torch_symm_alltoallv: --ranks must be in [2, 8]", file=sys.stderr)
        return 2
    try:
        import torch
        import torch.multiprocessing as mp
    except Exception as e:
        return skipped(args, f"torch not importable ({type(e).__name__})")
    if not torch.cuda.is_available() or torch.cuda.device_count() < args.ranks:
        return skipped(args, f"needs {args.ranks} GPUs, {torch.cuda.device_count() if torch.cuda.is_available() else 0} visible")
    try:
        import torch.distributed._symmetric_memory as symm_mem
        if hasattr(symm_mem, "is_nvshmem_available") and not symm_mem.is_nvshmem_available():
            return skipped(args, "NVSHMEM is not available to this torch")
        if not hasattr(torch.ops.symm_mem, "all_to_all_vdev"):
            return skipped(args, "torch.ops.symm_mem.all_to_all_vdev is missing")
    except Exception as e:
        return skipped(args, f"symmetric memory unavailable ({type(e).__name__}: {e})")

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, args.ranks, port, args.sizes, queue)) for r in range(args.ranks)]
    for p in procs:
        p.start()
    got = {}
    deadline = datetime.datetime.now() + datetime.timedelta(seconds=args.timeout)
    try:
        while len(got) < args.ranks:
            left = (deadline - datetime.datetime.now()).total_seconds()
            if left <= 0:
                break
            try:
                r, rows, err = queue.get(timeout=min(left, 5))
                got[r] = (rows, err)
            except Exception:
                if any(p.exitcode not in (None, 0) for p in procs):
                    break
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join()
    errors = [f"rank {r}: {e}" for r, (_, e) in sorted(got.items()) if e]
    missing = [r for r in range(args.ranks) if r not in got]
    if missing:
        errors.append(f"ranks {missing} did not report (timeout {args.timeout} s or crash)")
    results = []
    for size in args.sizes:
        results.append(row("skewed", args.ranks, size, status="skipped: " + SKEWED_UNSUPPORTED))
        for pattern in ("uniform",):
            per_rank = [next((x for x in got[r][0] if x[0] == pattern and x[1] == size), None) for r in got]
            if errors or len(per_rank) < args.ranks or any(x is None for x in per_rank):
                results.append(row(pattern, args.ranks, size, status="failed: " + ("; ".join(errors) or "no result")))
                continue
            # The slowest rank's median, like alltoallv_bench.
            t = max(x[2] for x in per_rank)
            wrong = sum(x[3] for x in per_rank)
            results.append(row(pattern, args.ranks, size, t, float(wrong),
                               "ok" if wrong == 0 else f"failed: {wrong} wrong elements"))
    write_run(args.out, results, torch)
    return 0 if not errors and all(r["status"] == "ok" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
