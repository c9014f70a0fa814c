//! The kubelet's PodResources API (`v1.PodResourcesLister`, gRPC on
//! `/var/lib/kubelet/pod-resources/kubelet.sock`): which pod holds which device.
//!
//! The messages (kubernetes `pkg/apis/podresources/v1/api.proto`, K8S-NOTES.md) are decoded
//! here from the protobuf wire format by hand; the agent needs five fields of them and no
//! code generator:
//!
//! ```text
//! ListPodResourcesResponse    { repeated PodResources pod_resources = 1; }
//! PodResources                { string name = 1; string namespace = 2; repeated ContainerResources containers = 3; }
//! ContainerResources          { string name = 1; repeated ContainerDevices devices = 2; ... }
//! ContainerDevices            { string resource_name = 1; repeated string device_ids = 2; ... }
//! AllocatableResourcesResponse{ repeated ContainerDevices devices = 1; ... }
//! ```
//!
//! Device ids are GPU or MIG UUIDs; a time-sliced (shared) device is offered as replicas
//! `<uuid>::<n>`, so a pod's share of the device is the replicas it holds over the replicas
//! the node offers.

use rust_decimal::Decimal;
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PodResourcesError {
    #[error("truncated protobuf message")]
    Truncated,
    #[error("protobuf wire type {0} is not one protobuf defines")]
    WireType(u64),
    #[error("a string field is not UTF-8")]
    Utf8,
    #[error("gRPC frame: {0}")]
    Frame(&'static str),
}

type Result<T> = std::result::Result<T, PodResourcesError>;

/// One device a pod's container holds.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Device {
    pub resource: String,
    pub id: String,
}

/// A pod and every device its containers hold.
#[derive(Debug, Clone, PartialEq)]
pub struct PodDevices {
    pub namespace: String,
    pub name: String,
    pub devices: Vec<Device>,
}

/// A field of a protobuf message: a length-delimited payload, or a scalar (varint or
/// fixed-width) that no message read here needs.
enum Field<'a> {
    Bytes(&'a [u8]),
    Scalar,
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self.buf.split_first().ok_or(PodResourcesError::Truncated)?;
            self.buf = rest;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(PodResourcesError::Truncated)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.buf.len() {
            return Err(PodResourcesError::Truncated);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn next_field(&mut self) -> Result<Option<(u64, Field<'a>)>> {
        if self.buf.is_empty() {
            return Ok(None);
        }
        let tag = self.varint()?;
        let field = match tag & 7 {
            0 => {
                self.varint()?;
                Field::Scalar
            }
            1 => {
                self.take(8)?;
                Field::Scalar
            }
            2 => {
                let n =
                    usize::try_from(self.varint()?).map_err(|_| PodResourcesError::Truncated)?;
                Field::Bytes(self.take(n)?)
            }
            5 => {
                self.take(4)?;
                Field::Scalar
            }
            other => return Err(PodResourcesError::WireType(other)),
        };
        Ok(Some((tag >> 3, field)))
    }
}

/// Calls `f` with each length-delimited field of `msg` (numbers and payloads); the
/// other fields are skipped.
fn each_bytes<'a>(msg: &'a [u8], mut f: impl FnMut(u64, &'a [u8]) -> Result<()>) -> Result<()> {
    let mut r = Reader { buf: msg };
    while let Some((n, field)) = r.next_field()? {
        if let Field::Bytes(b) = field {
            f(n, b)?;
        }
    }
    Ok(())
}

fn text(b: &[u8]) -> Result<String> {
    String::from_utf8(b.to_vec()).map_err(|_| PodResourcesError::Utf8)
}

fn container_devices(msg: &[u8], out: &mut Vec<Device>) -> Result<()> {
    let mut resource = String::new();
    let mut ids = Vec::new();
    each_bytes(msg, |n, b| {
        match n {
            1 => resource = text(b)?,
            2 => ids.push(text(b)?),
            _ => {}
        }
        Ok(())
    })?;
    out.extend(ids.into_iter().map(|id| Device {
        resource: resource.clone(),
        id,
    }));
    Ok(())
}

/// Decodes a `ListPodResourcesResponse`.
pub fn parse_list(msg: &[u8]) -> Result<Vec<PodDevices>> {
    let mut pods = Vec::new();
    each_bytes(msg, |n, pod| {
        if n != 1 {
            return Ok(());
        }
        let mut p = PodDevices {
            namespace: String::new(),
            name: String::new(),
            devices: Vec::new(),
        };
        each_bytes(pod, |n, b| {
            match n {
                1 => p.name = text(b)?,
                2 => p.namespace = text(b)?,
                3 => each_bytes(b, |n, d| {
                    if n == 2 {
                        container_devices(d, &mut p.devices)?;
                    }
                    Ok(())
                })?,
                _ => {}
            }
            Ok(())
        })?;
        pods.push(p);
        Ok(())
    })?;
    Ok(pods)
}

/// Decodes an `AllocatableResourcesResponse`: every device the node offers.
pub fn parse_allocatable(msg: &[u8]) -> Result<Vec<Device>> {
    let mut out = Vec::new();
    each_bytes(msg, |n, b| {
        if n == 1 {
            container_devices(b, &mut out)?;
        }
        Ok(())
    })?;
    Ok(out)
}

/// A gRPC request body: the uncompressed-message frame around `msg`.
pub fn frame(msg: &[u8]) -> Vec<u8> {
    let len = u32::try_from(msg.len()).expect("a request under 4 GiB");
    let mut out = Vec::with_capacity(5 + msg.len());
    out.push(0);
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(msg);
    out
}

/// The message of a unary gRPC response body.
pub fn unframe(body: &[u8]) -> Result<&[u8]> {
    let (&compressed, rest) = body
        .split_first()
        .ok_or(PodResourcesError::Frame("an empty response body"))?;
    if compressed != 0 {
        return Err(PodResourcesError::Frame(
            "a compressed message (the request offered no compression)",
        ));
    }
    let len: [u8; 4] = rest
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .ok_or(PodResourcesError::Frame("a truncated length prefix"))?;
    let len = u32::from_be_bytes(len) as usize;
    rest.get(4..4 + len).ok_or(PodResourcesError::Frame(
        "a message shorter than its length prefix",
    ))
}

/// A device id without its time-slicing replica suffix: `GPU-…::3` → (`GPU-…`, true).
pub fn base_device(id: &str) -> (&str, bool) {
    match id.rsplit_once("::") {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => (base, true),
        _ => (id, false),
    }
}

/// Whether an id names a device by UUID (what GPU and MIG meters carry); GKE's plugin uses
/// `nvidia0/gi0`-style names that no meter knows.
pub fn is_uuid(id: &str) -> bool {
    id.starts_with("GPU-") || id.starts_with("MIG-")
}

/// Each pod's devices with its share of each: the replicas it holds of a device over the
/// replicas `offered` per device (from the allocatable devices; a device missing there counts
/// the replicas pods hold). Shares have six decimal places, rounded down so the pods
/// of one device never add up to more than it; a whole device has no share (`None`).
pub fn shares(
    pods: &[PodDevices],
    offered: &[Device],
    wanted: impl Fn(&Device) -> bool,
) -> BTreeMap<(String, String), BTreeMap<String, Option<Decimal>>> {
    let mut replicas: BTreeMap<&str, u64> = BTreeMap::new();
    for d in offered.iter().filter(|d| wanted(d)) {
        *replicas.entry(base_device(&d.id).0).or_default() += 1;
    }
    let mut held: BTreeMap<&str, u64> = BTreeMap::new();
    for d in pods.iter().flat_map(|p| &p.devices).filter(|d| wanted(d)) {
        *held.entry(base_device(&d.id).0).or_default() += 1;
    }
    let mut out: BTreeMap<(String, String), BTreeMap<String, Option<Decimal>>> = BTreeMap::new();
    for p in pods {
        let mut count: BTreeMap<&str, u64> = BTreeMap::new();
        for d in p.devices.iter().filter(|d| wanted(d)) {
            *count.entry(base_device(&d.id).0).or_default() += 1;
        }
        if count.is_empty() {
            continue;
        }
        let devices = count
            .into_iter()
            .map(|(base, n)| {
                let of = replicas
                    .get(base)
                    .copied()
                    .unwrap_or_else(|| held.get(base).copied().unwrap_or(n))
                    .max(n);
                let share = (n < of).then(|| {
                    let ppm = n * 1_000_000 / of;
                    Decimal::new(ppm as i64, 6)
                });
                (base.to_owned(), share)
            })
            .collect();
        out.insert((p.namespace.clone(), p.name.clone()), devices);
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A protobuf encoder for the few messages the tests (and the fake kubelet) need.
    pub fn field(n: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = varint((n << 3) | 2);
        out.extend(varint(payload.len() as u64));
        out.extend_from_slice(payload);
        out
    }

    fn varint(mut v: u64) -> Vec<u8> {
        let mut out = Vec::new();
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                return out;
            }
            out.push(b | 0x80);
        }
    }

    pub fn devices(resource: &str, ids: &[&str]) -> Vec<u8> {
        let mut m = field(1, resource.as_bytes());
        for id in ids {
            m.extend(field(2, id.as_bytes()));
        }
        // TopologyInfo { repeated NUMANode nodes = 1 { int64 ID = 1 } }: skipped by the reader.
        m.extend(field(3, &field(1, &[0x08, 0x01])));
        m
    }

    pub fn pod(namespace: &str, name: &str, containers: &[Vec<u8>]) -> Vec<u8> {
        let mut m = field(1, name.as_bytes());
        m.extend(field(2, namespace.as_bytes()));
        for c in containers {
            m.extend(field(3, c));
        }
        m
    }

    pub fn container(name: &str, devs: &[Vec<u8>]) -> Vec<u8> {
        let mut m = field(1, name.as_bytes());
        for d in devs {
            m.extend(field(2, d));
        }
        // cpu_ids = 3, packed int64: skipped.
        m.extend(field(3, &[0x02, 0x03]));
        m
    }

    pub fn list(pods: &[Vec<u8>]) -> Vec<u8> {
        pods.iter().flat_map(|p| field(1, p)).collect()
    }

    const G0: &str = "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e";
    const MIG: &str = "MIG-2ce7a541-c516-5dbc-a76e-26cc100d9b55";

    #[test]
    fn a_list_response_decodes_pods_and_their_devices() {
        let msg = list(&[
            pod(
                "serving",
                "llama-0",
                &[
                    container("server", &[devices("nvidia.com/gpu", &[G0])]),
                    container("sidecar", &[]),
                ],
            ),
            pod("batch", "etl", &[container("c", &[])]),
            pod(
                "lab",
                "notebook",
                &[container(
                    "c",
                    &[devices("nvidia.com/mig-1g.10gb", &[&format!("{MIG}::7")])],
                )],
            ),
        ]);
        let pods = parse_list(&msg).unwrap();
        assert_eq!(pods.len(), 3);
        assert_eq!(
            (pods[0].namespace.as_str(), pods[0].name.as_str()),
            ("serving", "llama-0")
        );
        assert_eq!(
            pods[0].devices,
            vec![Device {
                resource: "nvidia.com/gpu".into(),
                id: G0.into()
            }]
        );
        assert!(pods[1].devices.is_empty());
        assert_eq!(base_device(&pods[2].devices[0].id), (MIG, true));
        assert_eq!(
            parse_list(&msg[..msg.len() - 3]),
            Err(PodResourcesError::Truncated)
        );
        assert_eq!(parse_list(&[]).unwrap(), vec![]);
    }

    #[test]
    fn time_sliced_replicas_become_shares_that_never_exceed_the_device() {
        let offered: Vec<Device> = (0..3)
            .map(|i| Device {
                resource: "nvidia.com/gpu".into(),
                id: format!("{G0}::{i}"),
            })
            .chain([Device {
                resource: "nvidia.com/gpu".into(),
                id: MIG.into(),
            }])
            .collect();
        let dev = |id: String| Device {
            resource: "nvidia.com/gpu".into(),
            id,
        };
        let pods = vec![
            PodDevices {
                namespace: "a".into(),
                name: "one".into(),
                devices: vec![dev(format!("{G0}::0"))],
            },
            PodDevices {
                namespace: "a".into(),
                name: "two".into(),
                devices: vec![
                    dev(format!("{G0}::1")),
                    dev(format!("{G0}::2")),
                    dev(MIG.into()),
                ],
            },
            PodDevices {
                namespace: "a".into(),
                name: "cpu".into(),
                devices: vec![],
            },
        ];
        let s = shares(&pods, &offered, |d| d.resource.starts_with("nvidia.com/"));
        assert_eq!(s.len(), 2, "a pod without devices holds nothing");
        assert_eq!(
            s[&("a".into(), "one".into())][G0],
            Some("0.333333".parse().unwrap())
        );
        assert_eq!(
            s[&("a".into(), "two".into())][G0],
            Some("0.666666".parse().unwrap())
        );
        assert_eq!(s[&("a".into(), "two".into())][MIG], None, "a whole device");
        // Without the allocatable list, replicas held are all that is known.
        let s = shares(&pods, &[], |_| true);
        assert_eq!(
            s[&("a".into(), "one".into())][G0],
            Some("0.333333".parse().unwrap())
        );
    }

    #[test]
    fn grpc_frames_and_device_names() {
        let f = frame(b"abc");
        assert_eq!(f, [0, 0, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(unframe(&f).unwrap(), b"abc");
        assert!(unframe(&[1, 0, 0, 0, 0]).is_err());
        assert!(unframe(&[0, 0, 0, 0, 9, 1]).is_err());
        assert_eq!(
            base_device("nvidia0/gi0/vgpu1"),
            ("nvidia0/gi0/vgpu1", false)
        );
        assert_eq!(base_device("GPU-a::x"), ("GPU-a::x", false));
        assert!(is_uuid(G0) && is_uuid(MIG) && !is_uuid("nvidia0/gi0"));
    }
}
