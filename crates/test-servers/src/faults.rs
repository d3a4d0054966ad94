//! What the scripted batch servers share: the log of the calls they got,
//! a call to hang at once, and the loop that serves a connection with that
//! fault injected, so a test can cut the client off where it chooses.

use std::io::BufReader;
use std::net::TcpStream;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::http::{read_request, write_reply};

/// The calls a server got, and the one it hangs at.
#[derive(Default)]
pub struct Faults {
    /// "METHOD /path" of every call, in order.
    pub calls: Vec<String>,
    /// The call to hang at (its "METHOD /path" prefix), once; cleared when hit.
    pub hang_at: Option<String>,
    /// A call is hanging.
    pub hung: bool,
    /// The test let the hung call go.
    pub release: bool,
}

/// One request as a handler sees it.
pub(crate) struct Incoming<'a> {
    pub method: &'a str,
    /// The path without its query.
    pub path: &'a str,
    /// The path with its query.
    pub target: &'a str,
    pub head: &'a str,
    pub body: &'a [u8],
}

/// Serves requests on `stream` until the client closes it: each call is
/// logged in the state's [`Faults`]; the call to hang at is held until the
/// test releases it, and then dropped unanswered. A batch creation
/// (`creates`) is handled first, so the provider holds a batch the client
/// never hears of.
pub(crate) fn serve<S>(
    stream: TcpStream,
    state: &Mutex<S>,
    faults: fn(&mut S) -> &mut Faults,
    creates: &str,
    handle: &dyn Fn(&Incoming) -> (u16, Vec<u8>),
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    while let Some((head, body)) = read_request(&mut reader) {
        let first = head.lines().next().unwrap_or_default();
        let mut parts = first.split_whitespace();
        let method = parts.next().unwrap_or_default();
        let target = parts.next().unwrap_or_default();
        let path = target.split('?').next().unwrap_or_default();
        let call = format!("{method} {path}");
        let hang = {
            let mut s = state.lock().unwrap();
            let f = faults(&mut s);
            f.calls.push(call.clone());
            let hit = f.hang_at.as_deref().is_some_and(|h| call.starts_with(h));
            if hit {
                f.hang_at = None;
            }
            hit
        };
        if hang && call != creates {
            return hold(state, faults);
        }
        let incoming = Incoming {
            method,
            path,
            target,
            head: &head,
            body: &body,
        };
        let (code, reply) = handle(&incoming);
        if hang {
            return hold(state, faults);
        }
        if !write_reply(&stream, code, &[], &reply) {
            return;
        }
    }
}

/// Holds a call until the test releases it (or 60 s pass).
fn hold<S>(state: &Mutex<S>, faults: fn(&mut S) -> &mut Faults) {
    faults(&mut state.lock().unwrap()).hung = true;
    let start = Instant::now();
    while !faults(&mut state.lock().unwrap()).release && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(20));
    }
}
