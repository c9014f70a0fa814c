//! One reconcile pass against the Kubernetes API: list the AdmissionChecks, keep the
//! `Active` condition of ours, list the Workloads, and answer every check of ours that is
//! `Pending` on a Workload holding quota. The rules are in the pure modules (`ask`,
//! `decision`, `record`, `params`); this module only reads, asks and writes.
//!
//! Why a full list every pass and no watch: a Workload needs one answer per quota
//! reservation, and Kueue holds its quota while the check is `Pending`, so a few seconds'
//! delay (`--resync-seconds`, 10 by default) costs nothing a batch job notices; lists are
//! consistent reads (never served from a watch cache that may lag our own last write, which
//! would make the controller ask twice), paged by 500, and need no watch bookkeeping
//! (bookmarks, expired resource versions, relists after a disconnect).
//!
//! Writes are server-side apply, as Kueue's own admission check controllers do, with the
//! field manager `wattledger-kueue`: the decision record on the Workload's metadata first,
//! then the check's entry on `status.admissionChecks` (a list keyed by name, so other
//! checks' entries are untouched), both conditional on the resource version read.

use crate::ask::question;
use crate::decision::{whole_seconds, Active, Answer, CheckUpdate};
use crate::metrics::Metrics;
use crate::objects::{AdmissionCheck, Workload, KUEUE_GROUP, KUEUE_VERSION};
use crate::params::{self, Parameters};
use crate::record::Record;
use crate::server::{Reply, Wattledger};
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// The field manager of every write.
pub const FIELD_MANAGER: &str = "wattledger-kueue";

/// Objects per list page.
const PAGE: u32 = 500;

/// A pass that could not read what it needs (it is retried at the next resync).
#[derive(Debug, thiserror::Error)]
#[error("listing {what}: {source}")]
pub struct PassError {
    what: &'static str,
    #[source]
    source: kube::Error,
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassReport {
    /// AdmissionChecks of ours, and how many of them are usable (parameters resolve).
    pub checks: usize,
    pub usable_checks: usize,
    /// Questions put to wattledger (answered or not).
    pub asked: usize,
    /// Check states written on Workloads.
    pub updated: usize,
    /// Recorded deferrals held without a question.
    pub held: usize,
    /// Workloads skipped for a Kubernetes error (retried next pass).
    pub skipped: usize,
}

/// How writing a decision record went.
enum Recorded {
    /// Written (the Workload's new resource version), or not written for an error that is
    /// no reason to drop the decision (its state is written on the version given).
    At(Option<String>),
    /// The Workload no longer waits on the check (evicted, deleted): nothing is written.
    MovedOn,
}

pub type Clock = Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("not a URL: {0}")]
    Url(String),
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

/// A client for the API server at `url` without credentials: `kubectl proxy`'s, or a
/// test's own. In a cluster the binary uses the pod's service account instead.
pub fn client_at(url: &str) -> Result<Client, ClientError> {
    let uri = url.parse().map_err(|_| ClientError::Url(url.to_owned()))?;
    Ok(Client::try_from(kube::Config::new(uri))?)
}

pub struct Controller {
    client: Client,
    server: Wattledger,
    metrics: Arc<Metrics>,
    clock: Clock,
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_conflict())
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_not_found())
}

/// Every object of `api`, page by page, each as JSON.
async fn list_all(api: &Api<DynamicObject>) -> Result<Vec<Value>, kube::Error> {
    let mut out = Vec::new();
    let mut lp = ListParams::default().limit(PAGE);
    loop {
        let page = api.list(&lp).await?;
        for obj in page.items {
            out.push(serde_json::to_value(obj).map_err(kube::Error::SerdeError)?);
        }
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => lp = lp.continue_token(&token),
            _ => return Ok(out),
        }
    }
}

/// The objects that read as `T`; one that does not is logged and left alone.
fn typed<T: DeserializeOwned>(objects: &[Value], what: &str) -> Vec<T> {
    objects
        .iter()
        .filter_map(|o| match T::deserialize(o) {
            Ok(t) => Some(t),
            Err(e) => {
                tracing::warn!(kind = what, name = %o["metadata"]["name"], error = %e,
                    "skipping an object that does not read");
                None
            }
        })
        .collect()
}

impl Controller {
    pub fn new(client: Client, server: Wattledger, metrics: Arc<Metrics>) -> Controller {
        Controller {
            client,
            server,
            metrics,
            clock: Arc::new(Utc::now),
        }
    }

    /// Reads the time from `clock` instead of the system's (tests step past a deferral).
    pub fn with_clock(mut self, clock: Clock) -> Controller {
        self.clock = clock;
        self
    }

    fn api(&self, kind: &str, plural: &str) -> Api<DynamicObject> {
        Api::all_with(
            self.client.clone(),
            &resource(KUEUE_GROUP, KUEUE_VERSION, kind, plural),
        )
    }

    fn workloads(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            namespace,
            &resource(KUEUE_GROUP, KUEUE_VERSION, "Workload", "workloads"),
        )
    }

    fn apply() -> PatchParams {
        PatchParams::apply(FIELD_MANAGER).force()
    }

    /// One pass over every AdmissionCheck and Workload.
    pub async fn reconcile(&self) -> Result<PassReport, PassError> {
        let mut report = PassReport::default();
        let result = self.pass(&mut report).await;
        if result.is_err() {
            self.metrics.kube_error();
        }
        self.metrics.pass_done((self.clock)().timestamp());
        result.map(|()| report)
    }

    async fn pass(&self, report: &mut PassReport) -> Result<(), PassError> {
        let listed = list_all(&self.api("AdmissionCheck", "admissionchecks"))
            .await
            .map_err(|source| PassError {
                what: "admissionchecks",
                source,
            })?;
        let ours: Vec<AdmissionCheck> = typed::<AdmissionCheck>(&listed, "AdmissionCheck")
            .into_iter()
            .filter(AdmissionCheck::is_ours)
            .collect();
        report.checks = ours.len();
        if ours.is_empty() {
            return Ok(());
        }
        let usable = self.keep_active(&ours).await?;
        report.usable_checks = usable.len();
        if usable.is_empty() {
            return Ok(());
        }
        let names: Vec<&str> = usable.keys().map(String::as_str).collect();
        let listed = list_all(&self.api("Workload", "workloads"))
            .await
            .map_err(|source| PassError {
                what: "workloads",
                source,
            })?;
        let mut namespaces: HashMap<String, BTreeMap<String, String>> = HashMap::new();
        for wl in typed::<Workload>(&listed, "Workload") {
            for check in wl.pending_checks(&names) {
                self.answer(&wl, check, &usable[check], &mut namespaces, report)
                    .await;
            }
        }
        Ok(())
    }

    /// Resolves each check's parameters and writes its `Active` condition where it is not
    /// already what it should be; returns the usable checks with their parameters.
    async fn keep_active(
        &self,
        ours: &[AdmissionCheck],
    ) -> Result<BTreeMap<String, Parameters>, PassError> {
        let objects = if ours.iter().any(|c| c.spec.parameters.is_some()) {
            let api = Api::all_with(
                self.client.clone(),
                &resource(params::GROUP, params::VERSION, params::KIND, params::PLURAL),
            );
            match list_all(&api).await {
                Ok(o) => o,
                // Our CRD is not installed: every reference is to a missing object.
                Err(e) if is_not_found(&e) => Vec::new(),
                Err(source) => {
                    return Err(PassError {
                        what: "admissioncheckparameters",
                        source,
                    })
                }
            }
        } else {
            Vec::new()
        };
        let find = |name: &str| objects.iter().find(|o| o["metadata"]["name"] == name);
        let mut usable = BTreeMap::new();
        let checks = self.api("AdmissionCheck", "admissionchecks");
        for ac in ours {
            let active = match Parameters::resolve(ac.spec.parameters.as_ref(), find) {
                Ok(p) => {
                    usable.insert(ac.metadata.name.clone(), p);
                    Active::ok()
                }
                Err(e) => Active::bad_parameters(&e.to_string()),
            };
            if active.is_current(ac) {
                continue;
            }
            let body = active.apply_body(ac, whole_seconds((self.clock)()));
            match checks
                .patch_status(&ac.metadata.name, &Self::apply(), &Patch::Apply(&body))
                .await
            {
                Ok(_) => tracing::info!(check = %ac.metadata.name, active = active.status,
                    reason = active.reason, message = %active.message, "admission check condition set"),
                Err(e) => {
                    self.metrics.kube_error();
                    tracing::warn!(check = %ac.metadata.name, error = %e, "could not set the Active condition");
                }
            }
        }
        Ok(usable)
    }

    /// The labels of `namespace`, read once per pass.
    async fn namespace_labels(
        &self,
        namespace: &str,
        cache: &mut HashMap<String, BTreeMap<String, String>>,
    ) -> Result<BTreeMap<String, String>, kube::Error> {
        if let Some(l) = cache.get(namespace) {
            return Ok(l.clone());
        }
        let ns = Api::<Namespace>::all(self.client.clone())
            .get(namespace)
            .await?;
        let labels = ns.metadata.labels.unwrap_or_default();
        cache.insert(namespace.to_owned(), labels.clone());
        Ok(labels)
    }

    /// Answers one `Pending` check of one Workload.
    async fn answer(
        &self,
        wl: &Workload,
        check: &str,
        params: &Parameters,
        namespaces: &mut HashMap<String, BTreeMap<String, String>>,
        report: &mut PassReport,
    ) {
        let (ns, name) = (wl.namespace(), wl.metadata.name.as_str());
        let mut resource_version = wl.metadata.resource_version.clone();
        if let Some((id, until)) = Record::read(wl, check)
            .and_then(|r| r.holds_until((self.clock)()).map(|until| (r.id, until)))
        {
            report.held += 1;
            let update = CheckUpdate::held(id, until);
            self.write(wl, check, &update, resource_version.as_deref(), report)
                .await;
            return;
        }
        let labels = match self.namespace_labels(ns, namespaces).await {
            Ok(l) => l,
            Err(e) => {
                self.metrics.kube_error();
                report.skipped += 1;
                tracing::warn!(namespace = ns, workload = name, error = %e,
                    "could not read the namespace for the tenant; retrying next pass");
                return;
            }
        };
        let update = match question(wl, &labels, params) {
            Err(e) => CheckUpdate::invalid(&e.to_string()),
            Ok(None) => CheckUpdate::no_gpus(),
            Ok(Some(q)) => {
                report.asked += 1;
                let key = crate::ask::idempotency_key(wl, check);
                match self.server.ask(&q, &key).await {
                    Ok(Reply::Answer(a)) => {
                        self.metrics.decision(a.decision);
                        tracing::info!(namespace = ns, workload = name, check,
                            decision = a.decision.as_str(), id = %a.decision_id,
                            start_at = ?a.start_at, "wattledger answered");
                        match self.record(wl, check, &a).await {
                            Recorded::At(rv) => resource_version = rv,
                            Recorded::MovedOn => {
                                report.skipped += 1;
                                return;
                            }
                        }
                        CheckUpdate::from_answer(&a)
                    }
                    Ok(Reply::Refused(why)) => CheckUpdate::invalid(&why),
                    Err(e) => {
                        self.metrics.server_failure();
                        tracing::warn!(namespace = ns, workload = name, check, error = %e,
                            policy = ?params.failure_policy, "wattledger did not answer");
                        CheckUpdate::unreachable(params, &e.to_string())
                    }
                }
            }
        };
        self.write(wl, check, &update, resource_version.as_deref(), report)
            .await;
    }

    /// Writes the decision record on the Workload.
    async fn record(&self, wl: &Workload, check: &str, a: &Answer) -> Recorded {
        let (ns, name) = (wl.namespace(), wl.metadata.name.as_str());
        let record = Record {
            check: check.to_owned(),
            decision: a.decision,
            id: a.decision_id,
            start_at: a.start_at,
        };
        let api = self.workloads(ns);
        let mut current = wl.clone();
        // Two tries: the Workload may have changed for an unrelated reason (Kueue touches
        // its conditions) between the list and now; then it is read again and, if the check
        // still waits, written on that version.
        for _ in 0..2 {
            let body = record.apply_body(&current);
            match api.patch(name, &Self::apply(), &Patch::Apply(&body)).await {
                Ok(obj) => return Recorded::At(obj.metadata.resource_version),
                Err(e) if is_conflict(&e) => match api.get(name).await {
                    Ok(fresh) => {
                        let fresh = serde_json::to_value(fresh)
                            .ok()
                            .and_then(|v| Workload::deserialize(&v).ok());
                        match fresh {
                            Some(f) if f.pending_checks(&[check]).contains(&check) => current = f,
                            _ => break,
                        }
                    }
                    Err(e) => {
                        self.metrics.kube_error();
                        tracing::warn!(namespace = ns, workload = name, error = %e, "could not re-read the Workload");
                        break;
                    }
                },
                Err(e) => {
                    self.metrics.kube_error();
                    tracing::warn!(namespace = ns, workload = name, error = %e,
                        "could not record the decision on the Workload; writing its state anyway");
                    return Recorded::At(current.metadata.resource_version.clone());
                }
            }
        }
        tracing::warn!(namespace = ns, workload = name, check, id = %a.decision_id,
            "the Workload moved on while wattledger was asked; decision not applied");
        Recorded::MovedOn
    }

    async fn write(
        &self,
        wl: &Workload,
        check: &str,
        update: &CheckUpdate,
        resource_version: Option<&str>,
        report: &mut PassReport,
    ) {
        let (ns, name) = (wl.namespace(), wl.metadata.name.as_str());
        let body = update.apply_body(wl, check, resource_version, whole_seconds((self.clock)()));
        match self
            .workloads(ns)
            .patch_status(name, &Self::apply(), &Patch::Apply(&body))
            .await
        {
            Ok(_) => {
                self.metrics.update(update.state);
                report.updated += 1;
                tracing::info!(namespace = ns, workload = name, check,
                    state = update.state.as_str(), message = %update.message, "admission check state set");
            }
            Err(e) => {
                self.metrics.kube_error();
                report.skipped += 1;
                tracing::warn!(namespace = ns, workload = name, check, error = %e,
                    "could not set the admission check state; retrying next pass");
            }
        }
    }
}
