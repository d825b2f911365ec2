#!/usr/bin/python3
"""Example gRPC client for colibri's Router service, in Python (Debian's python3-grpcio).

Generates the message classes from proto/ with the system protoc into a cache directory, then
streams a generation:

    tools/router_client.py --target 127.0.0.1:50050 --prompt "Hello" --max-tokens 16
    tools/router_client.py --target 127.0.0.1:50050 --chat "Why is the sky blue?"
    tools/router_client.py --target 127.0.0.1:50050 --tokens 1,2,3 --json
    tools/router_client.py --target 127.0.0.1:50050 --session "Hi!" --session "Tell me more."

--session (repeatable) uses the session API: the router keeps the conversation, each message is
sent alone, and compute reuses the previous turn's KV (see usage.cached_prompt_tokens).

A router started with API keys needs --api-key KEY (sent as `authorization: Bearer KEY`
metadata); one with mutual TLS needs --tls-cert/--tls-key/--tls-ca.

Any language works the same way: compile proto/colibri/v1/router.proto with your gRPC toolchain.
"""
import argparse
import importlib
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_protos(out_dir=None):
    """Compiles proto/colibri/v1/*.proto to Python and imports router_pb2."""
    out_dir = out_dir or os.path.join(tempfile.gettempdir(), f'colibri-py-protos-{os.getuid()}')
    os.makedirs(out_dir, exist_ok=True)
    protos = [os.path.join('colibri', 'v1', f'{n}.proto') for n in ('common', 'router')]
    subprocess.run(['protoc', f'--proto_path={os.path.join(REPO, "proto")}', f'--python_out={out_dir}', *protos],
                   check=True)
    if out_dir not in sys.path:
        sys.path.insert(0, out_dir)
    return importlib.import_module('colibri.v1.router_pb2')


class Auth:
    """How to reach the router: an API key (`authorization: Bearer KEY` metadata) and/or mutual
    TLS files (PEM paths). The defaults: plaintext, no key."""

    def __init__(self, api_key=None, tls_cert=None, tls_key=None, tls_ca=None):
        self.api_key, self.tls_cert, self.tls_key, self.tls_ca = api_key, tls_cert, tls_key, tls_ca

    def channel(self, target):
        import grpc
        if not self.tls_ca:
            return grpc.insecure_channel(target)

        def read(path):
            with open(path, 'rb') as f:
                return f.read()
        creds = grpc.ssl_channel_credentials(read(self.tls_ca), self.tls_key and read(self.tls_key),
                                             self.tls_cert and read(self.tls_cert))
        return grpc.secure_channel(target, creds)

    def metadata(self):
        return (('authorization', f'Bearer {self.api_key}'),) if self.api_key else ()


def stream(target, method, request, timeout=120, auth=Auth()):
    """Yields the RouterGenerateResponse messages of a streaming Router method: Generate (a
    RouterGenerateRequest) or SendMessage (a SendMessageRequest, one turn of a session)."""
    pb = sys.modules['colibri.v1.router_pb2']
    with auth.channel(target) as channel:
        call = channel.unary_stream(f'/colibri.v1.Router/{method}', request_serializer=type(request).SerializeToString,
                                    response_deserializer=pb.RouterGenerateResponse.FromString)
        yield from call(request, timeout=timeout, metadata=auth.metadata())


def unary(target, method, request, response_type, timeout=30, auth=Auth()):
    """Calls a unary Router method, e.g. unary(t, 'CreateSession', req, pb.SessionInfo)."""
    with auth.channel(target) as channel:
        call = channel.unary_unary(f'/colibri.v1.Router/{method}', request_serializer=type(request).SerializeToString,
                                   response_deserializer=response_type.FromString)
        return call(request, timeout=timeout, metadata=auth.metadata())


def collect(stream, echo):
    """Token ids, text, finish reason name and usage of a response stream."""
    ids, text, finish, usage = [], '', None, None
    for msg in stream:
        ids += list(msg.token_ids)
        text += msg.text
        if echo:
            print(msg.text, end='', flush=True)
        if msg.finish_reason:
            finish = sys.modules['colibri.v1.common_pb2'].FinishReason.Name(msg.finish_reason)
            usage = {'prompt_tokens': msg.usage.prompt_tokens, 'completion_tokens': msg.usage.completion_tokens,
                     'cached_prompt_tokens': msg.usage.cached_prompt_tokens}
    if echo:
        print()
    return {'token_ids': ids, 'text': text, 'finish_reason': finish, 'usage': usage}


def run_session(a, pb, auth):
    session = unary(a.target, 'CreateSession', pb.CreateSessionRequest(system_prompt=a.system or ''), pb.SessionInfo,
                    auth=auth)
    turns = []
    for message in a.session:
        req = pb.SendMessageRequest(session_id=session.session_id)
        req.message.role = 'user'
        req.message.content = message
        req.sampling.temperature = a.temperature
        if a.seed is not None:
            req.sampling.seed = a.seed
        req.stop.max_tokens = a.max_tokens
        if not a.json:
            print(f'> {message}')
        turns.append(collect(stream(a.target, 'SendMessage', req, auth=auth), echo=not a.json))
    info = unary(a.target, 'GetSession', pb.GetSessionRequest(session_id=session.session_id), pb.SessionInfo,
                 auth=auth)
    if a.json:
        print(json.dumps({'session_id': session.session_id, 'turns': turns, 'messages': len(info.messages)}))
    unary(a.target, 'DeleteSession', pb.DeleteSessionRequest(session_id=session.session_id),
          pb.DeleteSessionResponse, auth=auth)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--target', default='127.0.0.1:50050')
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument('--prompt')
    g.add_argument('--chat')
    g.add_argument('--tokens')
    g.add_argument('--session', action='append', help='a message of a session conversation (repeat for turns)')
    ap.add_argument('--system', help='system prompt of the --session conversation')
    ap.add_argument('--max-tokens', type=int, default=32)
    ap.add_argument('--temperature', type=float, default=0.0)
    ap.add_argument('--seed', type=int)
    ap.add_argument('--json', action='store_true', help='print token ids and finish reason as JSON')
    ap.add_argument('--api-key', default=os.environ.get('COLIBRI_API_KEY'),
                    help='API key of a router started with keys (default: $COLIBRI_API_KEY)')
    ap.add_argument('--tls-cert', help='PEM client certificate (router with mutual TLS)')
    ap.add_argument('--tls-key', help='PEM private key of --tls-cert')
    ap.add_argument('--tls-ca', help='PEM CA of the router\'s certificate')
    a = ap.parse_args()
    auth = Auth(a.api_key, a.tls_cert, a.tls_key, a.tls_ca)
    pb = load_protos()
    if a.session:
        run_session(a, pb, auth)
        return
    req = pb.RouterGenerateRequest()
    if a.prompt is not None:
        req.prompt = a.prompt
    elif a.chat is not None:
        req.chat.messages.add(role='user', content=a.chat)
    else:
        req.tokens.ids.extend(int(t) for t in a.tokens.split(','))
    req.sampling.temperature = a.temperature
    if a.seed is not None:
        req.sampling.seed = a.seed
    req.stop.max_tokens = a.max_tokens
    result = collect(stream(a.target, 'Generate', req, auth=auth), echo=not a.json)
    if a.json:
        print(json.dumps(result))


if __name__ == '__main__':
    main()
