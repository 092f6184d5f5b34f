#!/usr/bin/env python3
"""Memory a server holds for clients that declare large bulks and send little.

Usage: bench/declared-bulks.py BINARY [PORT] [--requirepass PW]

Starts BINARY (a cellserver build) on 127.0.0.1:PORT, opens 100 connections,
each sending `*1\\r\\n$16777216\\r\\n` and, after a pause, one byte, then
prints INFO's used_memory (the Go heap in use), the process RSS, how many of
the 100 connections were answered with an error, and whether another client
is still served. Bounded: 100 connections, a few seconds; loopback only.
"""
import socket, subprocess, sys, time

def main():
    args = sys.argv[1:]
    pw = None
    if "--requirepass" in args:
        i = args.index("--requirepass"); pw = args[i + 1]; del args[i:i + 2]
    binp = args[0]
    port = int(args[1]) if len(args) > 1 else 16479
    cmd = [binp, "--addr", f"127.0.0.1:{port}"] + (["--requirepass", pw] if pw else [])
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close(); break
            except OSError:
                if time.time() > deadline or p.poll() is not None:
                    sys.exit("server did not start")
                time.sleep(0.05)
        conns = []
        for _ in range(100):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(b"*1\r\n$16777216\r\n"); conns.append(s)
        time.sleep(0.5)
        for s in conns:
            try: s.sendall(b"x")
            except OSError: pass
        time.sleep(1)
        c = socket.create_connection(("127.0.0.1", port)); c.settimeout(5)
        if pw:
            c.sendall(b"*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n" % (len(pw), pw.encode())); c.recv(100)
        c.sendall(b"INFO memory\r\n"); time.sleep(0.3)
        info = c.recv(8192).decode()
        used = [l for l in info.split("\r\n") if l.startswith("used_memory:")]
        c.sendall(b"PING\r\n"); pong = c.recv(100)
        rss = int(subprocess.check_output(["ps", "-o", "rss=", "-p", str(p.pid)]).strip()) // 1024
        answered = 0
        for s in conns:
            s.settimeout(1)
            try:
                if s.recv(200).startswith(b"-"): answered += 1
            except OSError: pass
        print(f"{binp}: {used[0] if used else 'used_memory:?'} rss_mb:{rss} errors_to_declarers:{answered}/100 other_client:{pong!r}")
    finally:
        p.terminate(); p.wait()

if __name__ == "__main__":
    main()
