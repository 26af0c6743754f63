//! End-to-end tests across processes: stand-in API servers of two releases on loopback
//! sockets, real `mvproxy` processes in front of them, and the real `kubectl` as the client.

// The whole crate is tests: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod admin;
mod attacks;
mod cli;
mod client_body;
mod cluster;
mod deletions;
mod demo;
mod discovery;
mod discovery_agreement;
mod identity;
mod limits;
mod manifests;
mod metrics;
mod observability;
mod openapi;
mod peer_failures;
mod peer_sources;
mod readiness;
mod readme;
mod real_discovery;
mod routing;
mod target;
mod tls;
mod tls_files;
mod traces;
