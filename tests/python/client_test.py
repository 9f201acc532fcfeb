"""The Python client against a real kvidx-server process.

The test plays one vLLM engine rank itself: a ZMQ PUB on 127.0.0.1
publishing KV-event batches in vLLM's wire format (msgpack
[ts, [events], dp_rank], frames [topic, seq, payload]), so FindPrefix and
Route answer from events that went through the server's real ingest path.

Usage: client_test.py KVIDX_SERVER_BINARY   (run by ctest; Debian's
python3-grpcio, python3-protobuf, python3-zmq, python3-msgpack)
"""

import os
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest

import grpc
import msgpack
import zmq

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python"))
from kvidx_client import KvidxClient, KvidxError  # noqa: E402

SERVER = None
MODEL = "py-model"
BLOCK = 16


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stored(hashes, parent=None):
    return {"type": "BlockStored", "block_hashes": list(hashes), "parent_block_hash": parent,
            "token_ids": list(range(len(hashes) * BLOCK)), "block_size": BLOCK, "medium": "GPU"}


class Engine:
    """One engine rank publishing like vLLM's ZmqEventPublisher (no replay)."""

    def __init__(self, port):
        self.ctx = zmq.Context()
        self.pub = self.ctx.socket(zmq.PUB)
        self.pub.bind(f"tcp://127.0.0.1:{port}")
        self.seq = 0

    def publish(self, events):
        payload = msgpack.packb([time.time(), events, 0])
        self.pub.send_multipart([b"", struct.pack(">q", self.seq), payload])
        self.seq += 1

    def close(self):
        self.pub.close(linger=0)
        self.ctx.term()


class ClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        d = cls.tmp.name
        cls.grpc_port, metrics_port, cls.pub_port = free_port(), free_port(), free_port()
        with open(os.path.join(d, "token"), "w") as f:
            f.write("py-token\n")
        os.chmod(os.path.join(d, "token"), 0o600)
        with open(os.path.join(d, "kvidx.yaml"), "w") as f:
            f.write(f"""grpc:
  listen: "127.0.0.1:{cls.grpc_port}"
  admin_token_file: "{d}/token"
metrics:
  listen: "127.0.0.1:{metrics_port}"
data_dir: "{d}/data"
models:
  - name: "{MODEL}"
    hash_algo: sha256
    block_size: {BLOCK}
    int_block_hashes: true
engines:
  - replica: "py-engine"
    model: "{MODEL}"
    endpoint: "tcp://127.0.0.1:{cls.pub_port}"
""")
        cls.engine = Engine(cls.pub_port)
        cls.log = open(os.path.join(d, "server.log"), "w")
        cls.server = subprocess.Popen([SERVER, "--config", os.path.join(d, "kvidx.yaml")],
                                      stdout=cls.log, stderr=subprocess.STDOUT)
        cls.kv = KvidxClient(f"127.0.0.1:{cls.grpc_port}", timeout=5)
        cls.prompt = [1001, 1002, 1003, 1004]
        deadline = time.time() + 30
        while True:  # until the server is up and its SUB has joined the PUB
            cls.engine.publish([stored(cls.prompt)])
            try:
                best = cls.kv.find_prefix(MODEL, hashes=cls.prompt).best()
                if best is not None and best.matched_blocks == 4:
                    break
            except KvidxError:
                pass
            if time.time() > deadline:
                raise RuntimeError("kvidx-server did not index the engine's events; see " + d + "/server.log")
            time.sleep(0.1)

    @classmethod
    def tearDownClass(cls):
        cls.kv.close()
        cls.server.terminate()
        cls.server.wait(timeout=10)
        cls.log.close()
        cls.engine.close()
        cls.tmp.cleanup()

    def test_health(self):
        self.assertTrue(self.kv.health())

    def test_find_prefix(self):
        ans = self.kv.find_prefix(MODEL, hashes=self.prompt + [9999])
        self.assertEqual(ans.block_size, BLOCK)
        self.assertEqual(ans.blocks_in_query, 5)
        best = ans.best()
        self.assertEqual((best.replica, best.dp_rank, best.matched_blocks), ("py-engine", 0, 4))
        self.assertEqual(best.matched_tokens, 4 * BLOCK)
        self.assertIsNone(self.kv.find_prefix(MODEL, hashes=[4242]).best())

    def test_route_and_route_done(self):
        r = self.kv.route(MODEL, hashes=self.prompt, prompt_tokens=4 * BLOCK + 5, expected_output_tokens=32)
        self.assertEqual((r.replica, r.dp_rank), ("py-engine", 0))
        self.assertNotEqual(r.route_id, 0)
        self.assertEqual(r.reason, "affinity")
        self.assertEqual(r.candidates[0].gpu_blocks, 4)
        self.assertEqual(self.kv.route_done(r.route_id, prompt_tokens=69, cached_tokens=64), 64)
        with self.assertRaises(KvidxError) as done_twice:
            self.kv.route_done(r.route_id)
        self.assertEqual(done_twice.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("route_id", done_twice.exception.message)

    def test_bad_input_names_the_field(self):
        with self.assertRaises(KvidxError) as unknown_model:
            self.kv.route("no-such-model", hashes=[1])
        self.assertIn("model", unknown_model.exception.message)
        with self.assertRaises(KvidxError) as unknown_replica:
            self.kv.route(MODEL, hashes=[1], replicas=["nobody"])
        self.assertEqual(unknown_replica.exception.code, grpc.StatusCode.NOT_FOUND)
        self.assertIn("replicas[0]", unknown_replica.exception.message)
        with self.assertRaises(KvidxError) as absurd_n:
            self.kv.route(MODEL, hashes=[1], n=1 << 30)
        self.assertEqual(absurd_n.exception.code, grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("n:", absurd_n.exception.message)
        with self.assertRaises(ValueError):
            self.kv.find_prefix(MODEL)


if __name__ == "__main__":
    SERVER = sys.argv.pop(1)
    unittest.main()
