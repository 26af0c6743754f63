//! The in-memory object store: objects, a server-wide resourceVersion and the event history
//! watches replay from.
//!
//! Objects are keyed by group and resource, not version: like kube-apiserver, an object
//! exists once and every served version shows it (without any conversion here). Every write
//! takes the next resourceVersion and appends an event; the history is kept whole, which is
//! fine for a test server, so a watch can start from any resourceVersion a list returned.

use std::collections::BTreeMap;
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::broadcast;

use super::catalog::Target;

/// How many events a slow watcher may fall behind before its watch is closed.
const WATCH_BUFFER: usize = 1024;

#[derive(Debug)]
pub(super) struct Store {
    inner: Mutex<Inner>,
    events: broadcast::Sender<Arc<Event>>,
}

#[derive(Debug, Default)]
struct Inner {
    objects: BTreeMap<Key, Value>,
    revision: u64,
    history: Vec<Arc<Event>>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Key {
    group: String,
    resource: String,
    namespace: String,
    name: String,
}

/// What a list or watch selects: one resource, optionally one namespace and one name.
#[derive(Debug, Clone)]
pub(super) struct Selector {
    pub(super) group: String,
    pub(super) resource: String,
    pub(super) namespace: Option<String>,
    pub(super) name: Option<String>,
}

/// A watch event type, spelled as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub(super) enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One change, as stored (the handler sets `kind`/`apiVersion` per watch).
#[derive(Debug)]
pub(super) struct Event {
    pub(super) revision: u64,
    pub(super) kind: EventType,
    key: Key,
    pub(super) object: Value,
}

/// Why a write was refused; the handler maps each to kube's `Status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum StoreError {
    AlreadyExists(String),
    NotFound(String),
    /// The body is not an object, or has no usable name.
    Invalid(String),
    /// The body names another namespace (or name) than the path.
    Mismatch(String),
}

// === impl Store ===

impl Default for Store {
    fn default() -> Self {
        Self {
            inner: Mutex::default(),
            events: broadcast::channel(WATCH_BUFFER).0,
        }
    }
}

impl Store {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Creates an object; `namespace` is the request path's.
    pub(super) fn create(
        &self,
        target: &Target,
        namespace: Option<&str>,
        object: Value,
    ) -> Result<Value, StoreError> {
        let (key, object) = normalize(target, namespace, object)?;
        let mut inner = self.lock();
        if inner.objects.contains_key(&key) {
            return Err(StoreError::AlreadyExists(key.name));
        }
        Ok(self.write(&mut inner, key, object, EventType::Added))
    }

    /// Creates or replaces an object (the seeding path).
    pub(super) fn upsert(
        &self,
        target: &Target,
        namespace: Option<&str>,
        object: Value,
    ) -> Result<Value, StoreError> {
        let (key, mut object) = normalize(target, namespace, object)?;
        let mut inner = self.lock();
        let kind = match inner.objects.get(&key) {
            Some(old) => {
                keep_identity(old, &mut object);
                EventType::Modified
            }
            None => EventType::Added,
        };
        Ok(self.write(&mut inner, key, object, kind))
    }

    /// Replaces an existing object (PUT); the body must name the object of the path.
    pub(super) fn update(
        &self,
        target: &Target,
        namespace: Option<&str>,
        name: &str,
        object: Value,
    ) -> Result<Value, StoreError> {
        let (key, mut object) = normalize(target, namespace, object)?;
        if key.name != name {
            return Err(StoreError::Mismatch(
                "the name of the object does not match the name on the URL".to_owned(),
            ));
        }
        let mut inner = self.lock();
        let Some(old) = inner.objects.get(&key) else {
            return Err(StoreError::NotFound(key.name));
        };
        keep_identity(old, &mut object);
        let deleting = object.pointer("/metadata/deletionTimestamp").is_some();
        let kind = if deleting && !has_finalizers(&object) {
            inner.objects.remove(&key);
            EventType::Deleted
        } else {
            EventType::Modified
        };
        Ok(self.write(&mut inner, key, object, kind))
    }

    pub(super) fn get(
        &self,
        target: &Target,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        self.lock()
            .objects
            .get(&key(target, namespace, name))
            .cloned()
    }

    /// Removes an object, returning it with the resourceVersion of its deletion. An object
    /// that still has finalizers is only marked, as kube-apiserver does: `deletionTimestamp`
    /// set, kept (and returned so) until an update leaves it without finalizers.
    pub(super) fn delete(
        &self,
        target: &Target,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let key = key(target, namespace, name);
        let mut inner = self.lock();
        let mut object = inner.objects.remove(&key)?;
        if !has_finalizers(&object) {
            return Some(self.write(&mut inner, key, object, EventType::Deleted));
        }
        if let Some(meta) = metadata(&mut object) {
            meta.entry("deletionTimestamp")
                .or_insert_with(|| rfc3339(SystemTime::now()).into());
        }
        Some(self.write(&mut inner, key, object, EventType::Modified))
    }

    /// The selected objects (by namespace, then name) and the current resourceVersion.
    pub(super) fn list(&self, selector: &Selector) -> (Vec<Value>, u64) {
        let inner = self.lock();
        let items = inner
            .objects
            .iter()
            .filter(|(key, _)| selector.matches(key))
            .map(|(_, object)| object.clone())
            .collect();
        (items, inner.revision)
    }

    /// The events a new watch starts with, and the receiver of later ones. Without a
    /// resourceVersion (or with `0`) that is an `ADDED` per current object, as kube sends;
    /// with one, every recorded event after it.
    pub(super) fn watch(
        &self,
        selector: &Selector,
        since: Option<u64>,
    ) -> (Vec<Arc<Event>>, broadcast::Receiver<Arc<Event>>) {
        let inner = self.lock();
        // Subscribing under the lock that writers send under: no event is missed or doubled.
        let receiver = self.events.subscribe();
        let initial = match since {
            None | Some(0) => inner
                .objects
                .iter()
                .filter(|(key, _)| selector.matches(key))
                .map(|(key, object)| {
                    Arc::new(Event {
                        revision: revision_of(object),
                        kind: EventType::Added,
                        key: key.clone(),
                        object: object.clone(),
                    })
                })
                .collect(),
            Some(since) => inner
                .history
                .iter()
                .filter(|event| event.revision > since && selector.matches(&event.key))
                .cloned()
                .collect(),
        };
        (initial, receiver)
    }

    /// Stamps `object` with the next resourceVersion, stores it (unless deleted) and
    /// publishes the event.
    fn write(&self, inner: &mut Inner, key: Key, mut object: Value, kind: EventType) -> Value {
        inner.revision += 1;
        let revision = inner.revision;
        if let Some(meta) = metadata(&mut object) {
            meta.insert("resourceVersion".to_owned(), revision.to_string().into());
            // Go clients send `"creationTimestamp": null` for "unset".
            if meta.get("uid").is_none_or(Value::is_null) {
                meta.insert("uid".to_owned(), uid().into());
            }
            if meta.get("creationTimestamp").is_none_or(Value::is_null) {
                meta.insert(
                    "creationTimestamp".to_owned(),
                    rfc3339(SystemTime::now()).into(),
                );
            }
        }
        if kind != EventType::Deleted {
            inner.objects.insert(key.clone(), object.clone());
        }
        let event = Arc::new(Event {
            revision,
            kind,
            key,
            object: object.clone(),
        });
        inner.history.push(Arc::clone(&event));
        // No receivers is not an error: nobody is watching.
        let _ = self.events.send(event);
        object
    }
}

// === impl Selector ===

impl Selector {
    fn matches(&self, key: &Key) -> bool {
        key.group == self.group
            && key.resource == self.resource
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| *ns == key.namespace)
            && self.name.as_ref().is_none_or(|name| *name == key.name)
    }

    /// Whether `event` is one this selector's watch reports.
    pub(super) fn selects(&self, event: &Event) -> bool {
        self.matches(&event.key)
    }
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::AlreadyExists(name) => write!(f, "{name:?} already exists"),
            Self::NotFound(name) => write!(f, "{name:?} not found"),
            Self::Invalid(message) | Self::Mismatch(message) => f.write_str(message),
        }
    }
}

fn key(target: &Target, namespace: Option<&str>, name: &str) -> Key {
    Key {
        group: target.group.clone(),
        resource: target.resource.clone(),
        namespace: if target.namespaced {
            namespace.unwrap_or_default().to_owned()
        } else {
            String::new()
        },
        name: name.to_owned(),
    }
}

/// Checks the object's shape, settles its name and namespace, and returns its key.
/// `namespace` is the path's; without one a namespaced object keeps its own or gets
/// `default`, and a cluster-scoped object loses any it carries.
fn normalize(
    target: &Target,
    namespace: Option<&str>,
    mut object: Value,
) -> Result<(Key, Value), StoreError> {
    if !object.is_object() {
        return Err(StoreError::Invalid(
            "the body is not a JSON object".to_owned(),
        ));
    }
    let meta = metadata(&mut object)
        .ok_or_else(|| StoreError::Invalid("metadata is not an object".to_owned()))?;
    let name = name_of(meta)?;
    meta.insert("name".to_owned(), name.clone().into());
    let own = meta
        .get("namespace")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let namespace = if target.namespaced {
        let namespace = match (namespace, own.as_deref()) {
            (Some(path), Some(body)) if !body.is_empty() && path != body => {
                return Err(StoreError::Mismatch(
                    "the namespace of the provided object does not match the namespace sent on the request"
                        .to_owned(),
                ));
            }
            (Some(path), _) => path.to_owned(),
            (None, Some(body)) if !body.is_empty() => body.to_owned(),
            (None, _) => "default".to_owned(),
        };
        meta.insert("namespace".to_owned(), namespace.clone().into());
        namespace
    } else {
        meta.remove("namespace");
        String::new()
    };
    let key = Key {
        group: target.group.clone(),
        resource: target.resource.clone(),
        namespace,
        name,
    };
    Ok((key, object))
}

/// Whether an object's `metadata.finalizers` names any.
fn has_finalizers(object: &Value) -> bool {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

/// A replaced object keeps the uid, creationTimestamp and deletionTimestamp the server gave it.
fn keep_identity(old: &Value, object: &mut Value) {
    for field in ["uid", "creationTimestamp", "deletionTimestamp"] {
        if let (Some(value), Some(meta)) = (old["metadata"].get(field), metadata(object)) {
            meta.insert(field.to_owned(), value.clone());
        }
    }
}

/// `metadata.name`, or one made from `metadata.generateName` as kube does.
fn name_of(meta: &Map<String, Value>) -> Result<String, StoreError> {
    match meta.get("name").and_then(Value::as_str) {
        Some(name) if !name.is_empty() => Ok(name.to_owned()),
        _ => match meta.get("generateName").and_then(Value::as_str) {
            Some(prefix) if !prefix.is_empty() => Ok(format!("{prefix}{}", name_suffix())),
            _ => Err(StoreError::Invalid(
                "metadata.name: Required value: name or generateName is required".to_owned(),
            )),
        },
    }
}

/// The object's metadata map, created if absent; `None` if it is not an object.
fn metadata(object: &mut Value) -> Option<&mut Map<String, Value>> {
    object
        .as_object_mut()?
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
}

fn revision_of(object: &Value) -> u64 {
    object["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|rv| rv.parse().ok())
        .unwrap_or_default()
}

/// A random number; std's `RandomState` is freshly keyed on every call, which is enough
/// for uids and names that only need to differ.
fn random() -> u64 {
    RandomState::new().hash_one(SystemTime::now())
}

/// A version-4 UUID, as kube assigns to `metadata.uid`.
fn uid() -> String {
    let bits = (u128::from(random()) << 64) | u128::from(random());
    let bits = (bits & !(0xf << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62);
    let hex = format!("{bits:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Five characters from kube's `generateName` alphabet (no vowels, no confusable digits).
fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut bits = random();
    (0..5)
        .map(|_| {
            let c = ALPHABET[(bits % ALPHABET.len() as u64) as usize];
            bits /= ALPHABET.len() as u64;
            char::from(c)
        })
        .collect()
}

/// `time` as RFC 3339 in UTC with whole seconds, the form of `metav1.Time`.
pub(super) fn rfc3339(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), Howard Hinnant's `civil_from_days`
/// restricted to dates after the epoch.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}
