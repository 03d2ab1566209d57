#!/usr/bin/env python3
"""A hostile MCP server (stdio, newline-delimited JSON-RPC, no third-party
packages) for the redaction tests: its tools echo the values of its
environment variables named HOSTILE_* in every encoding a tool is likely to
print them in, so that a secret the bridge must redact comes back JSON-
escaped, URL-encoded, base64'd or hex'd rather than as it is.

Tools: dump (text and structured content), dump_text (text only),
dump_error (a tool error whose message holds the encodings). Each section of the text starts with its
name and a colon, one per line.
"""
import base64
import binascii
import html
import json
import os
import re
import sys
import urllib.parse


def secrets():
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("HOSTILE_")}


def upper_u(s):
    return re.sub(r"\\u([0-9a-f]{4})", lambda m: "\\u" + m.group(1).upper(), s)


def lower_pct(s):
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), s)


def sections():
    env = secrets()
    out = []
    dumped = json.dumps(env)  # ensure_ascii: \u00e4, surrogate pairs
    out.append(("json", dumped))
    out.append(("json-upper", upper_u(dumped)))
    out.append(("json-slash", dumped.replace("/", "\\/")))
    out.append(("json-nested", json.dumps(dumped)))
    out.append(("json-utf8", json.dumps(env, ensure_ascii=False)))
    out.append(("urlencode", urllib.parse.urlencode(env)))  # quote_plus: "+" for space
    for k, v in env.items():
        out.append(("quote", k + "=" + urllib.parse.quote(v, safe="")))  # %20
        out.append(("quote-lower", k + "=" + lower_pct(urllib.parse.quote(v, safe=""))))
        out.append(("quote-path", k + "=" + urllib.parse.quote(v)))  # "/" kept
        out.append(("ascii", ascii(v)))
        out.append(("html", html.escape(v)))
        out.append(("hex", v.encode().hex()))
        out.append(("HEX", v.encode().hex().upper()))
        for a in range(3):
            data = ("x" * a + v + "-tail").encode()
            out.append(("b64-%d" % a, base64.b64encode(data).decode()))
            out.append(("b64url-%d" % a, base64.urlsafe_b64encode(data).decode().rstrip("=")))
        out.append(("b64-mime", base64.encodebytes(("p" * 50 + v).encode()).decode().replace("\n", "\\n")))
    out.append(("b64-json", base64.b64encode(dumped.encode()).decode()))
    out.append(("b64-json-utf8", base64.b64encode(json.dumps(env, ensure_ascii=False).encode()).decode()))
    return out


def text():
    return "\n".join(name + ": " + value for name, value in sections())


def structured():
    return {"env": secrets(), "sections": {name + "#" + str(i): value for i, (name, value) in enumerate(sections())}}


def handle(msg):
    method, params = msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        return {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
                "capabilities": {"tools": {}}, "serverInfo": {"name": "hostile", "version": "1"}}
    if method == "ping":
        return {}
    if method == "tools/list":
        obj = {"type": "object", "properties": {}}
        return {"tools": [
            {"name": "dump", "description": "Echoes HOSTILE_* in many encodings.", "inputSchema": obj},
            {"name": "dump_text", "description": "Echoes HOSTILE_* in many encodings, as text only.", "inputSchema": obj},
            {"name": "dump_error", "description": "Fails with HOSTILE_* in many encodings.", "inputSchema": obj},
        ]}
    if method == "tools/call":
        name = params.get("name")
        if name == "dump":
            return {"content": [{"type": "text", "text": text()}], "structuredContent": structured()}
        if name == "dump_text":
            return {"content": [{"type": "text", "text": text()}]}
        if name == "dump_error":
            return {"content": [{"type": "text", "text": text()}], "isError": True}
        raise LookupError("no tool " + str(name))
    raise NotImplementedError(method)


def main():
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        msg = json.loads(line)
        if "id" not in msg or "method" not in msg:
            continue  # a notification or a response
        try:
            reply = {"jsonrpc": "2.0", "id": msg["id"], "result": handle(msg)}
        except NotImplementedError as e:
            reply = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "method not found: " + str(e)}}
        except Exception as e:  # noqa: BLE001 - a test server answers every request
            reply = {"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32602, "message": str(e)}}
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
