//! mvproxy-1's resources, sampled from `/proc`: RSS, descriptors, upstream connections and
//! sockets left in `CLOSE_WAIT`.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

/// `/proc/net/tcp` states (include/net/tcp_states.h).
const TCP_ESTABLISHED: u8 = 0x01;
const TCP_CLOSE_WAIT: u8 = 0x08;

/// mvproxy-1's resources at one moment.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    /// Since the load started.
    pub(crate) at: Duration,
    pub(crate) rss_kib: u64,
    /// Open file descriptors besides established upstream connections.
    pub(crate) fds: u64,
    /// Established TCP connections to its API server and its peers.
    pub(crate) upstream: u64,
}

/// Connections whose other end closed while mvproxy-1 kept their descriptor.
#[derive(Default)]
pub(crate) struct CloseWait {
    /// Socket inode → when it was first seen in `CLOSE_WAIT`.
    pub(crate) since: HashMap<u64, Duration>,
    pub(crate) seen: u64,
    pub(crate) longest: Duration,
}

impl CloseWait {
    pub(crate) fn update(&mut self, at: Duration, now: &[u64]) {
        self.since.retain(|inode, _| now.contains(inode));
        for inode in now {
            let first = *self.since.entry(*inode).or_insert_with(|| {
                self.seen += 1;
                at
            });
            self.longest = self.longest.max(at.saturating_sub(first));
        }
    }
}

/// TCP sockets by inode: state and remote address (`/proc/net/tcp`; the soak is on IPv4
/// loopback).
pub(crate) fn tcp_sockets() -> HashMap<u64, (u8, SocketAddr)> {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (ip, port) = f.get(2)?.split_once(':')?;
            // the address as the kernel holds it (network order), printed as a native u32
            let ip = Ipv4Addr::from(u32::from_str_radix(ip, 16).ok()?.to_ne_bytes());
            let port = u16::from_str_radix(port, 16).ok()?;
            let state = u8::from_str_radix(f.get(3)?, 16).ok()?;
            let inode = f.get(9)?.parse().ok()?;
            Some((inode, (state, SocketAddr::from((ip, port)))))
        })
        .collect()
}

/// RSS in KiB, open file descriptors besides established connections to `upstreams`, those
/// connections, and the inodes of sockets in `CLOSE_WAIT`, of `pid`.
pub(crate) fn usage(pid: u32, upstreams: &[SocketAddr]) -> Option<(u64, u64, u64, Vec<u64>)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    let tcp = tcp_sockets();
    let (mut fds, mut upstream, mut close_wait) = (0, 0, Vec::new());
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.flatten() {
        let inode = std::fs::read_link(entry.path()).ok().and_then(|l| {
            let l = l.to_string_lossy().into_owned();
            l.strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse::<u64>()
                .ok()
        });
        match inode.and_then(|i| Some((i, tcp.get(&i)?))) {
            Some((_, (TCP_ESTABLISHED, remote))) if upstreams.contains(remote) => upstream += 1,
            Some((i, (TCP_CLOSE_WAIT, _))) => {
                close_wait.push(i);
                fds += 1;
            }
            _ => fds += 1,
        }
    }
    Some((rss, fds, upstream, close_wait))
}

pub(crate) fn median(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}
