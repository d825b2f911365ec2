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


def stream(target, method, request, timeout=120):
    """Yields the RouterGenerateResponse messages of a streaming Router method: Generate (a
    RouterGenerateRequest) or SendMessage (a SendMessageRequest, one turn of a session)."""
    import grpc
    pb = sys.modules['colibri.v1.router_pb2']
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_stream(f'/colibri.v1.Router/{method}', request_serializer=type(request).SerializeToString,
                                    response_deserializer=pb.RouterGenerateResponse.FromString)
        yield from call(request, timeout=timeout)


def unary(target, method, request, response_type, timeout=30):
    """Calls a unary Router method, e.g. unary(t, 'CreateSession', req, pb.SessionInfo)."""
    import grpc
    with grpc.insecure_channel(target) as channel:
        call = channel.unary_unary(f'/colibri.v1.Router/{method}', request_serializer=type(request).SerializeToString,
                                   response_deserializer=response_type.FromString)
        return call(request, timeout=timeout)


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


def run_session(a, pb):
    session = unary(a.target, 'CreateSession', pb.CreateSessionRequest(system_prompt=a.system or ''), pb.SessionInfo)
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
        turns.append(collect(stream(a.target, 'SendMessage', req), echo=not a.json))
    info = unary(a.target, 'GetSession', pb.GetSessionRequest(session_id=session.session_id), pb.SessionInfo)
    if a.json:
        print(json.dumps({'session_id': session.session_id, 'turns': turns, 'messages': len(info.messages)}))
    unary(a.target, 'DeleteSession', pb.DeleteSessionRequest(session_id=session.session_id),
          pb.DeleteSessionResponse)


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
    a = ap.parse_args()
    pb = load_protos()
    if a.session:
        run_session(a, pb)
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
    result = collect(stream(a.target, 'Generate', req), echo=not a.json)
    if a.json:
        print(json.dumps(result))


if __name__ == '__main__':
    main()
