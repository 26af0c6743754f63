//! Objects stored by one release that a server of another release cannot decode.
//!
//! Releases share one etcd. When a release drops a version (kube-apiserver 1.37 dropped
//! `scheduling.k8s.io/v1alpha2`, in which 1.36 stores PodGroups), its scheme cannot decode
//! what an older server stored at it, and every list of that resource through it fails with a
//! `500` Status: `... StorageError: corrupt object, Code: 7, Key: /registry/podgroups/ns1/o1,
//! ... object not decodable ...: no kind "PodGroup" is registered for version
//! "scheduling.k8s.io/v1alpha2" ...`. Its controllers then never finish with those objects (a
//! namespace holding them stays `Terminating`), through mvproxy too: routing cannot fix
//! storage. Kubernetes does not migrate alpha versions, so the objects must be deleted or
//! migrated before such a server takes over; this module says which.
//!
//! Only `500` responses in JSON of at most [`MAX_STATUS_BYTES`] are read ([`parse`]); what
//! they name is kept in a bounded list ([`MAX_LISTED`], newest kept) for `/debug/clients`. A
//! lock is taken only for such a response.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::deleted::{Format, unwrap_protobuf};

/// Bytes of a `500` response copied at most for a look at its Status.
pub const MAX_STATUS_BYTES: usize = 64 << 10;
/// Undecodable objects listed at most (the oldest is forgotten first).
pub const MAX_LISTED: usize = 50;
/// Longest storage key kept (longer ones are cut).
const MAX_KEY: usize = 512;
/// Longest group-version accepted (a DNS subdomain, `/`, a version).
const MAX_GROUP_VERSION: usize = 253 + 1 + 63;
/// Longest kind accepted.
const MAX_KIND: usize = 63;

const NOT_DECODABLE: &str = "not decodable";
const REGISTERED: &str = "is registered for version \"";
const NO_KIND: &str = "no kind \"";
const KEY: &str = "Key: ";

/// What a server said it cannot decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The storage key of the first object named (`/registry/podgroups/ns1/o1`), when named.
    pub key: Option<String>,
    /// The stored group (`""`: core).
    pub group: String,
    /// The stored version.
    pub version: String,
    /// The kind the server has no type for, when named.
    pub kind: Option<String>,
}

/// Why a response names no undecodable object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Longer than [`MAX_STATUS_BYTES`].
    TooLarge,
    /// Not a JSON Kubernetes `Status` with a `message`.
    NotStatus,
    /// The message does not say an object is not decodable.
    NotUndecodable,
    /// The message names no plausible group-version.
    NoGroupVersion,
}

#[derive(Deserialize)]
struct Status<'a> {
    #[serde(default, borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
    #[serde(default, borrow)]
    message: Option<std::borrow::Cow<'a, str>>,
}

/// `metav1.Status` in Kubernetes protobuf: only its message (field 3, k8s.io/apimachinery
/// pkg/apis/meta/v1/generated.proto).
#[derive(Clone, PartialEq, prost::Message)]
struct StatusProto {
    #[prost(string, tag = "3")]
    message: String,
}

/// Reads a `500` response body, JSON or Kubernetes protobuf (what client-go's typed and
/// metadata clients ask for): the object a server said it cannot decode.
pub fn parse(format: Format, body: &[u8]) -> Result<Unreadable, Skip> {
    if body.len() > MAX_STATUS_BYTES {
        return Err(Skip::TooLarge);
    }
    match format {
        Format::Json => {
            let status: Status<'_> = serde_json::from_slice(body).map_err(|_| Skip::NotStatus)?;
            match (status.kind.as_deref(), status.message) {
                (Some("Status"), Some(message)) => parse_message(&message),
                _ => Err(Skip::NotStatus),
            }
        }
        Format::Protobuf => {
            use prost::Message;
            let (kind, raw) = unwrap_protobuf(body).map_err(|_| Skip::NotStatus)?;
            if kind != "Status" {
                return Err(Skip::NotStatus);
            }
            let status = StatusProto::decode(&raw[..]).map_err(|_| Skip::NotStatus)?;
            parse_message(&status.message)
        }
    }
}

/// Reads a Status message: the storage key, the stored group-version and the kind.
pub fn parse_message(message: &str) -> Result<Unreadable, Skip> {
    let at = message.find(NOT_DECODABLE).ok_or(Skip::NotUndecodable)?;
    let tail = &message[at..];
    let gv_at = tail.find(REGISTERED).ok_or(Skip::NoGroupVersion)?;
    let gv = quoted(&tail[gv_at + REGISTERED.len()..]).ok_or(Skip::NoGroupVersion)?;
    let (group, version) = group_version(gv).ok_or(Skip::NoGroupVersion)?;
    let kind = tail[..gv_at]
        .rfind(NO_KIND)
        .and_then(|k| quoted(&tail[k + NO_KIND.len()..]))
        .filter(|k| k.len() <= MAX_KIND && k.bytes().all(|b| b.is_ascii_alphanumeric()))
        .map(str::to_owned);
    let key = message[..at].rfind(KEY).and_then(|k| {
        let rest = &message[k + KEY.len()..];
        let end = rest
            .find(|c: char| c == ',' || c.is_whitespace())
            .unwrap_or(rest.len());
        let key = &rest[..end];
        key.starts_with('/').then(|| cut(key, MAX_KEY).to_owned())
    });
    Ok(Unreadable {
        key,
        group: group.to_owned(),
        version: version.to_owned(),
        kind,
    })
}

/// The text up to the next `"`, if there is one.
fn quoted(s: &str) -> Option<&str> {
    s.find('"').map(|end| &s[..end])
}

/// `group/version` or `version` (core), checked to be plausible so it can be a label value.
fn group_version(gv: &str) -> Option<(&str, &str)> {
    if gv.is_empty() || gv.len() > MAX_GROUP_VERSION {
        return None;
    }
    let (group, version) = gv.rsplit_once('/').unwrap_or(("", gv));
    let group_ok = group
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    let version_ok = !version.is_empty()
        && version.len() <= 63
        && version
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    (group_ok && version_ok).then_some((group, version))
}

/// `s` cut to at most `max` bytes, on a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// One undecodable object, in `/debug/clients`.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// Its storage key, when the server named it.
    pub key: Option<String>,
    /// The group it is stored at.
    pub stored_group: String,
    /// The version it is stored at.
    pub stored_version: String,
    /// The kind the server has no type for, when named.
    pub kind: Option<String>,
    /// The GVR requested (`group/version/resource`).
    pub requested: String,
    /// The server that could not read it.
    pub server: String,
    /// That server's release (`major.minor`), when known.
    pub server_release: Option<String>,
    /// Responses that named it.
    pub count: u64,
    /// Unix seconds.
    pub first_seen: f64,
    /// Unix seconds.
    pub last_seen: f64,
}

/// The undecodable objects seen, newest last, at most [`MAX_LISTED`].
#[derive(Debug, Default)]
pub struct Undecodable {
    listed: Mutex<VecDeque<Entry>>,
}

impl Undecodable {
    /// Records that `server` (of `release`) could not read `found` when asked for `requested`.
    pub fn note(
        &self,
        found: &Unreadable,
        requested: String,
        server: &str,
        release: Option<String>,
        now: SystemTime,
    ) {
        let at = super::clients::unix(now);
        let mut listed = self.lock();
        let same = |e: &Entry| {
            e.key == found.key
                && e.stored_group == found.group
                && e.stored_version == found.version
                && e.server == server
        };
        let mut entry = match listed.iter().position(same) {
            Some(i) => listed.remove(i),
            None => None,
        }
        .unwrap_or_else(|| Entry {
            key: found.key.clone(),
            stored_group: found.group.clone(),
            stored_version: found.version.clone(),
            kind: found.kind.clone(),
            requested: String::new(),
            server: server.to_owned(),
            server_release: None,
            count: 0,
            first_seen: at,
            last_seen: at,
        });
        entry.requested = requested;
        entry.server_release = release;
        entry.count += 1;
        entry.last_seen = at;
        listed.push_back(entry);
        while listed.len() > MAX_LISTED {
            listed.pop_front();
        }
    }

    /// The undecodable objects, newest first.
    pub fn report(&self) -> Vec<Entry> {
        self.lock().iter().rev().cloned().collect()
    }

    fn lock(&self) -> MutexGuard<'_, VecDeque<Entry>> {
        self.listed.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests;
