"""A web server to run in the sandbox itself, for calls that fetch pages side by side: the sandbox's
network on, it reaches its own loopback, and nothing outside is needed. Every page takes SECONDS, and
every request is written down in served.log (in the directory it runs in), so a page asked twice shows.

    file_write pages.py (SCRIPT), then: python3 pages.py PORT SECONDS
"""

SCRIPT = """\
import http.server, sys, time

class Pages(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open("served.log", "a") as log:
            log.write(self.path + "\\n")
        time.sleep(float(sys.argv[2]))
        body = ("<p>page " + self.path + "</p>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Pages).serve_forever()
"""
