//! HTTP/1.1 as the scripted servers need it: one request read from a
//! connection, one reply written, and a URL where nothing listens.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};

/// Reads one HTTP/1.1 request from a connection: its head (request line
/// and headers) and its body. `None` once the client has closed it.
pub fn read_request(reader: &mut BufReader<TcpStream>) -> Option<(String, Vec<u8>)> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let len = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .and_then(|v| v.trim().parse::<usize>().ok())
        })
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some((head, body))
}

/// Writes one reply; false when the client is gone.
pub(crate) fn write_reply(
    stream: &TcpStream,
    code: u16,
    extra: &[(&'static str, String)],
    body: &[u8],
) -> bool {
    let mut out = format!(
        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in extra {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    let mut w = stream;
    w.write_all(out.as_bytes()).is_ok() && w.write_all(body).is_ok() && w.flush().is_ok()
}

/// A listener on a free port of 127.0.0.1, and its base URL (`/v1`).
pub(crate) fn listen() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    (listener, url)
}

/// A URL where nothing listens (connection refused).
pub fn refused_url() -> String {
    let (listener, url) = listen();
    drop(listener);
    url
}
