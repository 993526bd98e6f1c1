"""Writes activation shards the way other tools write them (numpy,
safetensors, pyarrow), for cohort-rank's tests and benchmarks.

    make_shards.py mixed OUT_DIR D_IN SEED
        OUT_DIR/shards/: a.npy (300 rows f32), b.safetensors (200 rows f16),
        c.parquet (250 rows, a fixed-size list<float> column, ZSTD, row
        groups of 50), d.parquet (150 rows, D_IN float columns), notes.txt;
        OUT_DIR/all.npy: the same 900 rows in name order, as f32.
    make_shards.py bad OUT_DIR D_IN
        OUT_DIR/<case>.<ext> for each malformed case.
    make_shards.py upload DIR BUCKET PREFIX
        every file of DIR to s3://BUCKET/PREFIX/ (boto3, the AWS_* variables
        name the endpoint), creating the bucket.
"""
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from safetensors.numpy import save_file


def list_table(rows):
    d_in = rows.shape[1]
    flat = pa.array(rows.reshape(-1), type=pa.float32())
    return pa.table({"acts": pa.FixedSizeListArray.from_arrays(flat, d_in)})


def mixed(out, d_in, seed):
    rng = np.random.default_rng(seed)
    parts = [rng.standard_normal((n, d_in)).astype(np.float32) for n in (300, 200, 250, 150)]
    parts[1] = parts[1].astype(np.float16)
    shards = f"{out}/shards"
    import os

    os.makedirs(shards, exist_ok=True)
    np.save(f"{shards}/a.npy", parts[0])
    save_file({"activations": parts[1]}, f"{shards}/b.safetensors")
    pq.write_table(list_table(parts[2]), f"{shards}/c.parquet", compression="zstd", row_group_size=50)
    cols = {f"f{j:04d}": parts[3][:, j] for j in range(d_in)}
    pq.write_table(pa.table(cols), f"{shards}/d.parquet", compression="zstd")
    with open(f"{shards}/notes.txt", "w") as f:
        f.write("not a shard\n")
    np.save(f"{out}/all.npy", np.concatenate([p.astype(np.float32) for p in parts]))


def bad(out, d_in):
    rows = np.ones((10, d_in), dtype=np.float32)
    np.save(f"{out}/ints.npy", rows.astype(np.int32))
    np.save(f"{out}/truncated.npy", rows)
    with open(f"{out}/truncated.npy", "r+b") as f:
        f.truncate(f.seek(0, 2) - 7)
    np.save(f"{out}/narrow.npy", np.ones((10, d_in - 1), dtype=np.float32))
    pq.write_table(pa.table({"acts": pa.array([[1, 2]] * 5, type=pa.list_(pa.int64()))}), f"{out}/intlist.parquet")
    ragged = [[1.0] * d_in] * 4 + [[1.0] * (d_in + 1)]
    pq.write_table(pa.table({"acts": pa.array(ragged, type=pa.list_(pa.float32()))}), f"{out}/ragged.parquet")
    with open(f"{out}/garbage.parquet", "wb") as f:
        f.write(b"PAR1 this is not parquet")


def upload(src, bucket, prefix):
    import os

    import boto3

    s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    if bucket not in [b["Name"] for b in s3.list_buckets().get("Buckets", [])]:
        s3.create_bucket(Bucket=bucket)
    for name in sorted(os.listdir(src)):
        path = os.path.join(src, name)
        if os.path.isfile(path):
            s3.upload_file(path, bucket, f"{prefix.rstrip('/')}/{name}")


if __name__ == "__main__":
    kind, out = sys.argv[1], sys.argv[2]
    if kind == "upload":
        upload(out, sys.argv[3], sys.argv[4])
    elif kind == "mixed":
        mixed(out, int(sys.argv[3]), int(sys.argv[4]))
    else:
        bad(out, int(sys.argv[3]))
