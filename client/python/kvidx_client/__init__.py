"""A small typed client for kvidx (kvidx.v1.KvIndex) over gRPC.

    from kvidx_client import KvidxClient
    kv = KvidxClient("127.0.0.1:50051")
    route = kv.route("llama-3-8b", tokens=prompt_ids, expected_output_tokens=256)
    send_to(route.replica, route.dp_rank)          # the router's own HTTP call
    kv.route_done(route.route_id, prompt_tokens=usage.prompt_tokens,
                  cached_tokens=usage.prompt_tokens_details.cached_tokens)

Errors are raised as KvidxError carrying the gRPC status code and the
server's message (which names the offending field). The generated stubs
live in kvidx_client/_pb (scripts/gen-python-client.sh); the raw stub is
`KvidxClient.stub` for anything the wrapper does not cover.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Union

import grpc

# protoc writes absolute imports ("from kvidx.v1 import kvidx_pb2") and has
# no option to prefix them, so the stubs' directory goes on the path.
_PB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_pb")
if not os.path.isdir(_PB):
    raise ImportError("kvidx_client: generated stubs missing; run scripts/gen-python-client.sh")
if _PB not in sys.path:
    sys.path.insert(0, _PB)

import health_pb2  # noqa: E402
import health_pb2_grpc  # noqa: E402
from kvidx.v1 import kvidx_pb2 as pb  # noqa: E402
from kvidx.v1 import kvidx_pb2_grpc as pb_grpc  # noqa: E402

__all__ = ["KvidxClient", "KvidxError", "ReplicaMatch", "PrefixAnswer", "RouteCandidate", "RouteAnswer", "pb"]


class KvidxError(Exception):
    """A failed call: `code` is the grpc.StatusCode, `message` the server's."""

    def __init__(self, code: grpc.StatusCode, message: str):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class ReplicaMatch:
    replica: str
    dp_rank: int
    source: str
    matched_blocks: int
    matched_blocks_with_lower_tiers: int
    matched_tokens: int
    state: str


@dataclass(frozen=True)
class PrefixAnswer:
    model: str
    blocks_in_query: int
    block_size: int
    replicas: List[ReplicaMatch] = field(default_factory=list)

    def best(self) -> Optional[ReplicaMatch]:
        """The replica holding the longest GPU prefix, or None."""
        return max(self.replicas, key=lambda r: r.matched_blocks, default=None)


@dataclass(frozen=True)
class RouteCandidate:
    replica: str
    dp_rank: int
    gpu_blocks: int
    cpu_blocks: int
    storage_blocks: int
    predicted_blocks: int
    cost: float


@dataclass(frozen=True)
class RouteAnswer:
    replica: str
    dp_rank: int
    source: str
    route_id: int
    reason: str
    prompt_tokens: int
    candidates: List[RouteCandidate] = field(default_factory=list)


def _prompt(message, tokens: Optional[Sequence[int]], hashes: Optional[Sequence[int]],
            text: Optional[str] = None, chat: Optional[Union[dict, str]] = None) -> None:
    given = sum(x is not None for x in (tokens, hashes, text, chat))
    if given != 1:
        raise ValueError("give exactly one of tokens, hashes, text and chat")
    if tokens is not None:
        message.tokens.token_ids.extend(tokens)
    elif hashes is not None:
        message.hashes.u64.extend(hashes)
    elif text is not None:
        message.text.text = text.encode()
    else:
        # The chat-completions body as the router received it: the server
        # renders the model's chat template as vLLM's chat endpoint does.
        message.text.chat_request_json = (chat if isinstance(chat, str) else json.dumps(chat)).encode()


def _state(value: int) -> str:
    return pb.SourceState.Name(value).removeprefix("SOURCE_STATE_")


class KvidxClient:
    """One channel to a kvidx-server; thread-safe like the grpc channel."""

    def __init__(self, target: str, timeout: float = 2.0, channel: Optional[grpc.Channel] = None):
        self.channel = channel or grpc.insecure_channel(target)
        self.stub = pb_grpc.KvIndexStub(self.channel)
        self._health = health_pb2_grpc.HealthStub(self.channel)
        self.timeout = timeout

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> "KvidxClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method, request):
        try:
            return method(request, timeout=self.timeout)
        except grpc.RpcError as e:  # a grpc.Call: code() and details()
            raise KvidxError(e.code(), e.details() or "") from None

    def health(self, service: str = "") -> bool:
        """True if the server reports SERVING (grpc.health.v1)."""
        resp = self._call(self._health.Check, health_pb2.HealthCheckRequest(service=service))
        return resp.status == health_pb2.HealthCheckResponse.SERVING

    def find_prefix(self, model: str, *, tokens: Optional[Sequence[int]] = None,
                    hashes: Optional[Sequence[int]] = None, text: Optional[str] = None,
                    chat: Optional[Union[dict, str]] = None, replicas: Sequence[str] = ()) -> PrefixAnswer:
        """Longest cached prefix per replica and DP rank. `text` (a completions
        prompt) and `chat` (a chat-completions body) need the model's tokenizer
        configured on the server."""
        req = pb.FindPrefixRequest(model=model, replicas=list(replicas))
        _prompt(req, tokens, hashes, text, chat)
        resp = self._call(self.stub.FindPrefix, req)
        return PrefixAnswer(resp.model, resp.blocks_in_query, resp.block_size, [
            ReplicaMatch(m.replica, m.dp_rank, m.source, m.matched_blocks, m.matched_blocks_with_lower_tiers,
                         m.matched_tokens, _state(m.state)) for m in resp.replicas])

    def route(self, model: str, *, tokens: Optional[Sequence[int]] = None, hashes: Optional[Sequence[int]] = None,
              text: Optional[str] = None, chat: Optional[Union[dict, str]] = None,
              prompt_tokens: int = 0, replicas: Sequence[str] = (), expected_output_tokens: int = 0,
              n: int = 1, request_id: int = 0) -> RouteAnswer:
        """Where to send a request; report its end with route_done. `text` and
        `chat` as for find_prefix."""
        req = pb.RouteRequest(model=model, prompt_tokens=prompt_tokens, replicas=list(replicas),
                              expected_output_tokens=expected_output_tokens, n=n, request_id=request_id)
        _prompt(req, tokens, hashes, text, chat)
        resp = self._call(self.stub.Route, req)
        return RouteAnswer(resp.replica, resp.dp_rank, resp.source, resp.route_id,
                           pb.RouteReason.Name(resp.reason).removeprefix("ROUTE_REASON_").lower(),
                           resp.prompt_tokens, [
                               RouteCandidate(c.replica, c.dp_rank, c.gpu_blocks, c.cpu_blocks, c.storage_blocks,
                                              c.predicted_blocks, c.cost) for c in resp.candidates])

    def tokenize(self, model: str, *, text: Optional[str] = None,
                 chat: Optional[Union[dict, str]] = None) -> List[int]:
        """The prompt's token ids as the server computes them."""
        req = pb.TokenizeRequest(model=model)
        if (text is None) == (chat is None):
            raise ValueError("give exactly one of text and chat")
        if text is not None:
            req.prompt.text = text.encode()
        else:
            req.prompt.chat_request_json = (chat if isinstance(chat, str) else json.dumps(chat)).encode()
        return list(self._call(self.stub.Tokenize, req).token_ids)

    def route_done(self, route_id: int, *, ok: bool = True, prompt_tokens: int = 0, cached_tokens: int = 0) -> int:
        """Ends a route; returns the cached tokens kvidx expected when it routed."""
        outcome = pb.ROUTE_OUTCOME_OK if ok else pb.ROUTE_OUTCOME_FAILED
        req = pb.RouteDoneRequest(route_id=route_id, outcome=outcome, prompt_tokens=prompt_tokens,
                                  cached_tokens=cached_tokens)
        return self._call(self.stub.RouteDone, req).predicted_cached_tokens
