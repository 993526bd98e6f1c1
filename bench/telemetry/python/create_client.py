"""An external CreateTraining client for cohort-bench-control.

What another team's Python service does: no generated code, the messages
are built from the coordinator's reflection service (grpcio-reflection),
requests from JSON, `--in-flight` calls at a time on one channel
(grpc.aio). Prints one line per call, "create <latency µs>", as the Rust
workers do, so the bench reads both the same way.

    python create_client.py --url http://127.0.0.1:50051 --count 1000 --in-flight 8 --index 0
"""

import argparse
import asyncio
import os
import sys
import time

import grpc
from google.protobuf import descriptor_pool, json_format, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

METHOD = "/cohort.v1.TrainingService/CreateTraining"


def message_classes(target):
    """CreateTraining's request and response classes, from reflection."""
    with grpc.insecure_channel(target) as channel:
        pool = descriptor_pool.DescriptorPool(ProtoReflectionDescriptorDatabase(channel))
        service = pool.FindServiceByName("cohort.v1.TrainingService")
        method = service.methods_by_name["CreateTraining"]
        return (
            message_factory.GetMessageClass(method.input_type),
            message_factory.GetMessageClass(method.output_type),
        )


def request_json(index, i, gpus):
    return {
        "request_id": f"py-{os.getpid()}-{index}-{i}",
        "config": {
            "model": {"d_in": 32, "d_sae": 128},
            "optim": {"learning_rate": 0.003, "batch_size": 32, "steps": 60},
            "data": {"synthetic": {"num_samples": 4096, "num_features": 64}},
            "runtime": {"device": "DEVICE_CPU"},
        },
        "gpus": {"count": gpus, "queue": True},
    }


async def drive(target, count, in_flight, index, gpus):
    request_class, response_class = message_classes(target)
    requests = [
        json_format.ParseDict(request_json(index, i, gpus), request_class()) for i in range(count)
    ]
    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.unary_unary(
            METHOD,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_class.FromString,
        )
        gate = asyncio.Semaphore(max(1, in_flight))
        lines = []

        async def one(request):
            async with gate:
                started = time.perf_counter_ns()
                await call(request)
                lines.append(f"create {(time.perf_counter_ns() - started) // 1000}")

        await asyncio.gather(*(one(r) for r in requests))
    sys.stdout.write("\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--in-flight", type=int, default=8)
    parser.add_argument("--index", type=int, default=0)
    parser.add_argument("--gpus-per-training", type=int, default=1)
    args = parser.parse_args()
    target = args.url.removeprefix("http://")
    asyncio.run(drive(target, args.count, args.in_flight, args.index, args.gpus_per_training))


if __name__ == "__main__":
    main()
