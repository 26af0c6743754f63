//! End-to-end tests across processes: stand-in API servers of two releases on loopback
//! sockets, real `mvproxy` processes in front of them, and the real `kubectl` as the client.

mod cli;
mod cluster;
mod demo;
mod discovery;
mod routing;
mod tls;
