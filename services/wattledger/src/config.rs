//! Server configuration from flags and environment (`WATTLEDGER_*`, `DATABASE_URL`).

use std::net::IpAddr;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use wattledger_domain::webhooks::Reach;

/// What the server needs to run; every field has a flag and an environment variable.
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// Postgres URL. Without one, a private PostgreSQL is started under --data-dir.
    #[arg(long, global = true, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// Where the embedded PostgreSQL keeps its data when no DATABASE_URL is given.
    #[arg(
        long,
        global = true,
        env = "WATTLEDGER_DATA_DIR",
        default_value = ".wattledger"
    )]
    pub data_dir: PathBuf,
    /// Address the API listens on.
    #[arg(
        long,
        global = true,
        env = "WATTLEDGER_LISTEN",
        default_value = "127.0.0.1:8080"
    )]
    pub listen: SocketAddr,
    /// Address of an HTTPS listener beside --listen, serving the same API (the Kubernetes API
    /// server calls admission webhooks only over HTTPS). Needs --tls-cert-file and
    /// --tls-key-file.
    #[arg(long, global = true, env = "WATTLEDGER_TLS_LISTEN")]
    pub tls_listen: Option<SocketAddr>,
    /// PEM certificate chain (leaf first) for --tls-listen, e.g. cert-manager's tls.crt.
    /// Read again when it changes: a rotated certificate needs no restart.
    #[arg(long, global = true, env = "WATTLEDGER_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of --tls-cert-file, e.g. cert-manager's tls.key.
    #[arg(long, global = true, env = "WATTLEDGER_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// How often the certificate and key files are checked for a rotated pair, ms.
    #[arg(
        long,
        global = true,
        env = "WATTLEDGER_TLS_RELOAD_MS",
        default_value_t = 30_000
    )]
    pub tls_reload_ms: u64,
    /// How the Kubernetes API server is let in to the admission webhook
    /// (`/v1/admission/kubernetes`): `token`, a scheduler token it sends from the kubeconfig
    /// its AdmissionConfiguration names (self-managed clusters); `open`, no token on the
    /// --tls-listen listener for that one path (EKS, GKE, AKS: their API servers cannot send
    /// one). Open, any caller that reaches the TLS port may ask about a pod it describes: it
    /// learns the verdict and its reasons, and an admitted pod's GPUs are reserved for its
    /// declared duration; nothing else answers without a token
    #[arg(long, global = true, env = "WATTLEDGER_WEBHOOK_AUTH", value_enum, default_value_t = WebhookAuth::Token)]
    pub webhook_auth: WebhookAuth,
    /// HS256 signing key for API tokens (at least 32 bytes). Without one, a key is generated
    /// once and kept in <data-dir>/jwt.key.
    #[arg(
        long,
        global = true,
        env = "WATTLEDGER_JWT_SECRET",
        hide_env_values = true
    )]
    pub jwt_secret: Option<String>,
    /// The longest an API token may live (`400d`, `90d`, `12h`, or seconds): minting a
    /// longer one is refused, and so is a token whose `exp` is further than this from its
    /// `iat`.
    #[arg(long, global = true, env = "WATTLEDGER_TOKEN_MAX_TTL", default_value = "400d",
          value_parser = parse_lifetime)]
    pub token_max_ttl: i64,
    /// How often each replica reads every revoked API token again, ms. Revocations reach the
    /// replicas at once (LISTEN/NOTIFY); this heals one whose notification was lost.
    #[arg(
        long,
        global = true,
        env = "WATTLEDGER_TOKEN_RELOAD_MS",
        default_value_t = 60_000
    )]
    pub token_reload_ms: u64,
    /// Largest request body accepted, in bytes.
    #[arg(long, global = true, env = "WATTLEDGER_MAX_BODY_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Most records accepted in one ingest batch.
    #[arg(
        long,
        global = true,
        env = "WATTLEDGER_MAX_BATCH_RECORDS",
        default_value_t = 50_000
    )]
    pub max_batch_records: usize,
    /// How far in the future a sample's timestamp may be (clock skew), in seconds.
    #[arg(
        long,
        global = true,
        env = "WATTLEDGER_MAX_CLOCK_SKEW_S",
        default_value_t = 300
    )]
    pub max_clock_skew_s: i64,
    /// Ingest requests in flight at once; one more is answered 429 with `Retry-After` at once
    /// (nothing read or written), rather than waiting on the database until it times out.
    #[arg(
        long,
        global = true,
        env = "WATTLEDGER_MAX_INGEST_IN_FLIGHT",
        default_value_t = 256
    )]
    pub max_ingest_in_flight: usize,
    /// How often admission reloads reservations from every replica, ms (the staleness bound
    /// between replicas); sites, forecasts and budgets reload every 15 of these.
    #[arg(
        long,
        global = true,
        env = "WATTLEDGER_ADMISSION_REFRESH_MS",
        default_value_t = 2000
    )]
    pub admission_refresh_ms: u64,
    /// Draw per GPU (W) assumed for a job with no history and no typical draw for its device.
    #[arg(
        long,
        global = true,
        env = "WATTLEDGER_ADMISSION_DEFAULT_GPU_W",
        default_value_t = 700
    )]
    pub admission_default_gpu_w: u32,
    /// Where webhooks may go beyond public https addresses: any of `loopback`, `private`,
    /// `http`, comma-separated (tests, on-premises receivers). Metadata and link-local
    /// addresses are never allowed.
    #[arg(long, global = true, env = "WATTLEDGER_WEBHOOK_ALLOW", default_value = "",
          value_parser = parse_reach)]
    pub webhook_allow: Reach,
    /// PEM certificates trusted for webhook deliveries beside the public roots (a private
    /// CA of on-premises receivers).
    #[arg(long, global = true, env = "WATTLEDGER_WEBHOOK_CA_FILE")]
    pub webhook_ca_file: Option<PathBuf>,
    /// How often the webhook dispatcher looks for due messages, ms.
    #[arg(
        long,
        global = true,
        env = "WATTLEDGER_WEBHOOK_POLL_MS",
        default_value_t = 1000
    )]
    pub webhook_poll_ms: u64,
    /// Where a month close writes its exports (statement CSV, FOCUS, JSON, SHA256SUMS), one
    /// folder per month and version; unset, they are only kept in the database and served by
    /// the API.
    #[arg(long, global = true, env = "WATTLEDGER_EXPORT_DIR")]
    pub export_dir: Option<PathBuf>,
    /// Who issues chargeback statements (FOCUS ProviderName, PublisherName,
    /// InvoiceIssuerName): the organisation running the cluster.
    #[arg(
        long,
        global = true,
        env = "WATTLEDGER_ISSUER",
        default_value = "GPU Platform"
    )]
    pub issuer: String,
    /// Reverse proxies in front of the server (IPs or networks, comma-separated): the client
    /// address they forward in X-Forwarded-For is believed, for the sign-in throttle.
    /// Without them, every client behind a proxy counts as the proxy.
    #[arg(long, global = true, env = "WATTLEDGER_TRUSTED_PROXIES", default_value = "",
          value_parser = parse_proxies)]
    pub trusted_proxies: TrustedProxies,
    /// Run the attribution worker inside the server (with retention and partition upkeep).
    #[arg(long, global = true, env = "WATTLEDGER_WORKER", default_value_t = true, action = clap::ArgAction::Set)]
    pub worker: bool,
    /// Days step records are kept; older monthly partitions are dropped whole.
    #[arg(
        long,
        global = true,
        env = "WATTLEDGER_RETENTION_STEPS_DAYS",
        default_value_t = 400
    )]
    pub retention_steps_days: u32,
    /// Days raw readings (records without step_s) are kept; older daily partitions are
    /// dropped whole.
    #[arg(
        long,
        global = true,
        env = "WATTLEDGER_RETENTION_RAW_DAYS",
        default_value_t = 14
    )]
    pub retention_raw_days: u32,
    /// Keep meter data of any month not yet closed (chargeback), whatever its age. Sites
    /// that do not close months set it to false.
    #[arg(long, global = true, env = "WATTLEDGER_RETENTION_KEEP_UNCLOSED_MONTHS",
          default_value_t = true, action = clap::ArgAction::Set)]
    pub retention_keep_unclosed_months: bool,
}

/// The HTTPS listener's settings, checked together.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub listen: SocketAddr,
    pub files: KeyPairFiles,
    pub reload_every: Duration,
}

/// HTTPS settings that do not go together.
#[derive(Debug, thiserror::Error)]
pub enum TlsSettingsError {
    #[error("--tls-listen (WATTLEDGER_TLS_LISTEN) needs {0} as well")]
    Missing(&'static str),
    #[error("{0} is set but --tls-listen (WATTLEDGER_TLS_LISTEN) is not, so nothing would use it")]
    Unused(&'static str),
    #[error("--tls-reload-ms (WATTLEDGER_TLS_RELOAD_MS) must be at least 1")]
    NoReloadInterval,
}

/// A lifetime in seconds, by the duration grammar of the annotations; at least a second.
fn parse_lifetime(s: &str) -> Result<i64, String> {
    match wattledger_wire::parse_duration(s) {
        Some(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "'{s}' is not a lifetime: e.g. 400d, 90d, 12h or a number of seconds"
        )),
    }
}

fn parse_reach(s: &str) -> Result<Reach, String> {
    Reach::parse(s)
}

/// How the admission webhook's caller is authenticated (`Config::webhook_auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WebhookAuth {
    /// A scheduler token, as every other API call.
    Token,
    /// No token, on the TLS listener only.
    Open,
}

fn parse_proxies(s: &str) -> Result<TrustedProxies, String> {
    TrustedProxies::parse(s)
}

impl Config {
    /// Defaults for tests and the demo: loopback, embedded database, worker on.
    pub fn for_tests(database_url: String, jwt_secret: String) -> Self {
        Config {
            database_url: Some(database_url),
            data_dir: PathBuf::from(".wattledger"),
            listen: "127.0.0.1:0".parse().expect("valid address"),
            tls_listen: None,
            tls_cert_file: None,
            tls_key_file: None,
            tls_reload_ms: 30_000,
            webhook_auth: WebhookAuth::Token,
            jwt_secret: Some(jwt_secret),
            token_max_ttl: crate::auth::DEFAULT_MAX_TTL_S,
            token_reload_ms: 60_000,
            max_body_bytes: 16 * 1024 * 1024,
            max_batch_records: 50_000,
            max_clock_skew_s: 300,
            max_ingest_in_flight: 256,
            admission_refresh_ms: 200,
            admission_default_gpu_w: 700,
            webhook_allow: Reach {
                loopback: true,
                private: false,
                http: true,
            },
            webhook_ca_file: None,
            webhook_poll_ms: 200,
            export_dir: None,
            issuer: "GPU Platform".into(),
            trusted_proxies: TrustedProxies::default(),
            worker: false,
            retention_steps_days: 400,
            retention_raw_days: 14,
            retention_keep_unclosed_months: true,
        }
    }

    /// The HTTPS listener, if one is configured: an address and both files, or none of them.
    pub fn tls(&self) -> Result<Option<TlsSettings>, TlsSettingsError> {
        const CERT: &str = "--tls-cert-file (WATTLEDGER_TLS_CERT_FILE)";
        const KEY: &str = "--tls-key-file (WATTLEDGER_TLS_KEY_FILE)";
        let Some(listen) = self.tls_listen else {
            return match (&self.tls_cert_file, &self.tls_key_file) {
                (None, None) => Ok(None),
                (Some(_), _) => Err(TlsSettingsError::Unused(CERT)),
                (None, Some(_)) => Err(TlsSettingsError::Unused(KEY)),
            };
        };
        let cert = self
            .tls_cert_file
            .clone()
            .ok_or(TlsSettingsError::Missing(CERT))?;
        let key = self
            .tls_key_file
            .clone()
            .ok_or(TlsSettingsError::Missing(KEY))?;
        if self.tls_reload_ms == 0 {
            return Err(TlsSettingsError::NoReloadInterval);
        }
        Ok(Some(TlsSettings {
            listen,
            files: KeyPairFiles { cert, key },
            reload_every: Duration::from_millis(self.tls_reload_ms),
        }))
    }

    pub fn retention(&self) -> wattledger_store::retention::Policy {
        wattledger_store::retention::Policy {
            steps_days: self.retention_steps_days,
            raw_days: self.retention_raw_days,
            keep_unclosed_months: self.retention_keep_unclosed_months,
        }
    }
}

/// Where the PEM certificate chain (leaf first) and its private key are.
#[derive(Debug, Clone)]
pub struct KeyPairFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Networks whose connections are reverse proxies: `X-Forwarded-For` from them is believed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<(IpAddr, u8)>);

impl TrustedProxies {
    /// `10.0.0.5`, `10.0.0.0/8`, `fd00::/8`, comma-separated; empty trusts nobody.
    pub fn parse(list: &str) -> Result<TrustedProxies, String> {
        let mut nets = Vec::new();
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (addr, bits) = match item.split_once('/') {
                Some((a, b)) => (a, Some(b)),
                None => (item, None),
            };
            let ip: IpAddr = addr
                .parse()
                .map_err(|_| format!("'{item}' is not an IP address or network"))?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            let bits = match bits {
                None => max,
                Some(b) => b
                    .parse::<u8>()
                    .ok()
                    .filter(|b| *b <= max)
                    .ok_or_else(|| format!("'{item}': the prefix length must be 0 to {max}"))?,
            };
            nets.push((ip, bits));
        }
        Ok(TrustedProxies(nets))
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|&(net, bits)| in_network(ip, net, bits))
    }
}

fn in_network(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}
