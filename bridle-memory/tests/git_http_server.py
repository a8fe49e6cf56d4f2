"""A private git host on 127.0.0.1 for the clone-credential tests: git's own smart-HTTP server
(`git http-backend`, run as CGI) behind HTTP Basic authentication.

Usage: git_http_server.py <folder of bare repositories>. The one account is GIT_SERVER_USER
with the password GIT_SERVER_SECRET (environment). It prints the port it listens on, then one
line per request: `<method> <path> auth=<yes|no|empty|other>`: the right Authorization header,
none, an empty user and password (what git sends when its prompt answers nothing), or another.
A request without the right one gets 401.
"""
import base64, os, subprocess, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = sys.argv[1]
USER = os.environ["GIT_SERVER_USER"]
EXPECTED = "Basic " + base64.b64encode(
    (USER + ":" + os.environ["GIT_SERVER_SECRET"]).encode()).decode()
EMPTY = "Basic " + base64.b64encode(b":").decode()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.serve()

    def do_POST(self):
        self.serve()

    def serve(self):
        auth = self.headers.get("Authorization")
        state = ("no" if auth is None else "yes" if auth == EXPECTED
                 else "empty" if auth == EMPTY else "other")
        path, _, query = self.path.partition("?")
        print("%s %s auth=%s" % (self.command, path, state), flush=True)
        if state != "yes":
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = dict(os.environ,
                   GIT_PROJECT_ROOT=ROOT, GIT_HTTP_EXPORT_ALL="1", PATH_INFO=path,
                   QUERY_STRING=query, REQUEST_METHOD=self.command, REMOTE_USER=USER,
                   CONTENT_TYPE=self.headers.get("Content-Type", ""),
                   CONTENT_LENGTH=str(len(body)),
                   HTTP_CONTENT_ENCODING=self.headers.get("Content-Encoding", ""),
                   GIT_PROTOCOL=self.headers.get("Git-Protocol", ""))
        out = subprocess.run(["git", "http-backend"], input=body, env=env,
                             capture_output=True).stdout
        sep = b"\r\n\r\n" if b"\r\n\r\n" in out else b"\n\n"
        head, _, payload = out.partition(sep)
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
