//! A coordinator started with its security on (TLS, tokens, an agent CA),
//! the certificates it needs made by the real `openssl`, and clients that
//! present a token: what the security tests drive.

use crate::bins::{binaries, Binaries};
use crate::cluster::CLI_TIMEOUT;
use crate::launch;
use crate::procs::ChildProc;
use cohort_testkit::PortLease;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;
use tonic::metadata::MetadataValue;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

/// Runs `openssl` with `args` in `dir`, panicking with its output on failure.
fn openssl(dir: &Path, args: &[&str]) {
    let output = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("running openssl");
    assert!(
        output.status.success(),
        "openssl {args:?} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A certificate authority in a directory, and the certificates it signs.
pub struct Pki {
    dir: PathBuf,
    /// The CA's name: file names start with it.
    pub name: String,
}

/// A certificate and its key.
#[derive(Debug, Clone)]
pub struct CertPair {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Pki {
    /// A new self-signed CA `name` (files `<name>-ca.pem`, `<name>-ca.key`).
    pub fn new(dir: &Path, name: &str) -> Pki {
        std::fs::create_dir_all(dir).expect("pki dir");
        let (cert, key) = (format!("{name}-ca.pem"), format!("{name}-ca.key"));
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &cert,
                "-days",
                "2",
                "-subj",
                &format!("/CN={name} test CA"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        );
        Pki {
            dir: dir.to_path_buf(),
            name: name.to_string(),
        }
    }

    /// The CA certificate (PEM).
    pub fn ca(&self) -> PathBuf {
        self.dir.join(format!("{}-ca.pem", self.name))
    }

    /// A leaf certificate `file` signed by this CA for `cn` with the
    /// subject alternative names `san` (e.g. `IP:127.0.0.1,DNS:agent-0`).
    pub fn issue(&self, file: &str, cn: &str, san: &str) -> CertPair {
        let (key, csr, cert, ext) = (
            format!("{file}.key"),
            format!("{file}.csr"),
            format!("{file}.pem"),
            format!("{file}.ext"),
        );
        std::fs::write(
            self.dir.join(&ext),
            format!("subjectAltName={san}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n"),
        )
        .expect("writing the extensions");
        openssl(
            &self.dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &format!("/CN={cn}"),
            ],
        );
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &format!("{}-ca.pem", self.name),
                "-CAkey",
                &format!("{}-ca.key", self.name),
                "-CAcreateserial",
                "-out",
                &cert,
                "-days",
                "2",
                "-extfile",
                &ext,
            ],
        );
        CertPair {
            cert: self.dir.join(cert),
            key: self.dir.join(key),
        }
    }

    /// A server certificate for 127.0.0.1 and localhost.
    pub fn server(&self, file: &str) -> CertPair {
        self.issue(file, "127.0.0.1", "IP:127.0.0.1,DNS:localhost")
    }

    /// An agent's client certificate: its identity is `name`.
    pub fn agent(&self, file: &str, name: &str) -> CertPair {
        self.issue(file, name, &format!("DNS:{name}"))
    }
}

/// How to start a [`SecureCoordinator`].
#[derive(Debug, Clone, Default)]
pub struct SecureOptions {
    /// `--tls-cert`/`--tls-key`.
    pub tls: Option<CertPair>,
    /// `--agent-ca`.
    pub agent_ca: Option<PathBuf>,
    /// `--auth` (`token`, `none`, `auto`).
    pub auth: String,
    /// More flags.
    pub extra: Vec<String>,
}

/// A coordinator on 127.0.0.1 with an SQLite database, killed on drop.
pub struct SecureCoordinator {
    pub bins: Binaries,
    pub port: u16,
    pub data_dir: PathBuf,
    pub root: PathBuf,
    pub options: SecureOptions,
    pub mark: String,
    process: Option<ChildProc>,
    agents: Vec<ChildProc>,
    /// The port, held bound until the first start hands it over.
    lease: Option<PortLease>,
}

impl SecureCoordinator {
    /// Creates the data dir under `root`; nothing runs yet (see [`Self::start`]).
    pub fn new(root: &Path, options: SecureOptions) -> SecureCoordinator {
        let data_dir = root.join("coordinator");
        std::fs::create_dir_all(&data_dir).expect("data dir");
        let lease = PortLease::new();
        SecureCoordinator {
            bins: binaries().clone(),
            port: lease.port(),
            lease: Some(lease),
            data_dir,
            root: root.to_path_buf(),
            options,
            mark: uuid::Uuid::new_v4().simple().to_string(),
            process: None,
            agents: Vec::new(),
        }
    }

    /// A token-auth coordinator (with `extra` flags), started, with the
    /// bootstrap tokens ops/root (cluster-admin), vision/dev and nlp/dev
    /// (editors), in that order.
    pub async fn with_team_tokens(
        dir: &Path,
        extra: Vec<String>,
    ) -> (SecureCoordinator, [String; 3]) {
        let mut c = SecureCoordinator::new(
            dir,
            SecureOptions {
                auth: "token".into(),
                extra,
                ..Default::default()
            },
        );
        let root = c.bootstrap_token("ops", "root", "cluster-admin");
        let vision = c.bootstrap_token("vision", "dev", "editor");
        let nlp = c.bootstrap_token("nlp", "dev", "editor");
        c.start().await;
        (c, [root, vision, nlp])
    }

    /// `cohort-coordinator token create` against the data dir: the secret.
    pub fn bootstrap_token(&self, team: &str, name: &str, role: &str) -> String {
        let output = Command::new(&self.bins.coordinator)
            .args(["token", "create", "--data-dir"])
            .arg(&self.data_dir)
            .args(["--team", team, "--name", name, "--role", role])
            .env_remove("COHORT_DATABASE_URL")
            .output()
            .expect("running token create");
        assert!(
            output.status.success(),
            "token create failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let stdout = String::from_utf8_lossy(&output.stdout);
        stdout.lines().last().expect("a secret").trim().to_string()
    }

    /// Starts the coordinator and waits until it answers (health is open).
    pub async fn start(&mut self) {
        let log = self.root.join("coordinator.log");
        let mut command = launch::coordinator(&self.bins, self.port, &self.data_dir, &self.mark);
        command
            .arg("--auth")
            .arg(&self.options.auth)
            .args(&self.options.extra);
        if let Some(tls) = &self.options.tls {
            command
                .arg("--tls-cert")
                .arg(&tls.cert)
                .arg("--tls-key")
                .arg(&tls.key);
        }
        if let Some(ca) = &self.options.agent_ca {
            command.arg("--agent-ca").arg(ca);
        }
        // Bound since `new`; bound again on the same port for a restart.
        let port = self.port;
        let lease = (self.lease.take().map(Ok))
            .unwrap_or_else(|| PortLease::on(port))
            .unwrap_or_else(|e| panic!("port {port} is taken: {e}"));
        lease.pass_to(&mut command, 3);
        let mut process = ChildProc::spawn("coordinator", command, &log);
        drop(lease);
        let listening = launch::until_ready(&mut process, Duration::from_secs(60), || async {
            self.try_channel()
                .await
                .map(|_| ())
                .map_err(|e| format!("{e:?}"))
        })
        .await;
        self.process = Some(process);
        if let Err(e) = listening {
            panic!("the coordinator did not listen: {e}\n{}", self.log());
        }
    }

    /// The coordinator's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.root.join("coordinator.log")).unwrap_or_default()
    }

    /// Sends `signal` to the coordinator.
    pub fn signal(&mut self, signal: nix::sys::signal::Signal) {
        if let Some(p) = self.process.as_mut() {
            p.signal_group(signal);
        }
    }

    /// `https://` with TLS, else `http://`.
    pub fn url(&self) -> String {
        let scheme = if self.options.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The plaintext URL of the same port (to show TLS refuses it).
    pub fn plain_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A channel that trusts `ca` (TLS) or none (plaintext).
    pub async fn channel_with(
        &self,
        ca: Option<&Path>,
    ) -> Result<Channel, tonic::transport::Error> {
        let mut endpoint =
            Endpoint::from_shared(self.url())?.connect_timeout(Duration::from_secs(3));
        if let Some(ca) = ca {
            let pem = std::fs::read(ca).expect("reading the CA");
            endpoint = endpoint.tls_config(
                ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(pem))
                    .domain_name("127.0.0.1"),
            )?;
        }
        endpoint.connect().await
    }

    async fn try_channel(&self) -> Result<Channel, tonic::transport::Error> {
        let ca = self
            .options
            .tls
            .as_ref()
            .map(|_| self.root.join("pki/main-ca.pem"));
        self.channel_with(ca.as_deref()).await
    }

    /// A channel trusting the test CA (`<root>/pki/main-ca.pem`) when TLS is on.
    pub async fn channel(&self) -> Channel {
        self.try_channel()
            .await
            .unwrap_or_else(|e| panic!("connecting to {}: {e:?}", self.url()))
    }

    /// Runs the CLI with this coordinator's URL, CA and `token`.
    pub async fn cli(&self, token: Option<&str>, args: &[&str]) -> Output {
        let mut command = tokio::process::Command::new(&self.bins.cli);
        command
            .arg("--coordinator")
            .arg(self.url())
            .env_remove("COHORT_COORDINATOR")
            .env_remove("COHORT_TOKEN")
            .env_remove("COHORT_CA_CERT")
            .env("COHORT_CACHE_DIR", self.root.join("cli-cache"));
        if self.options.tls.is_some() {
            command
                .arg("--ca-cert")
                .arg(self.root.join("pki/main-ca.pem"));
        }
        if let Some(token) = token {
            command.env("COHORT_TOKEN", token);
        }
        command.args(args);
        crate::procs::output_within(&mut command, CLI_TIMEOUT, &format!("cohort {args:?}")).await
    }

    /// [`Self::cli`] that must exit 0: its stdout.
    pub async fn cli_ok(&self, token: Option<&str>, args: &[&str]) -> String {
        let output = self.cli(token, args).await;
        assert!(
            output.status.success(),
            "cohort {args:?} failed ({}):\nstdout: {}\nstderr: {}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Starts an agent `name` with `gpus` simulated GPUs and `flags` (its
    /// TLS files, data roots); its log is `<root>/<file>.log`.
    pub fn start_agent(&mut self, file: &str, name: &str, gpus: usize, flags: &[String]) {
        let work_dir = self.root.join(file);
        std::fs::create_dir_all(&work_dir).expect("agent work dir");
        let url = self.url();
        let mut command = launch::agent(
            &self.bins,
            &launch::AgentLaunch {
                coordinators: &url,
                name,
                gpus,
                work_dir: &work_dir,
                interval: "300ms",
                mark: &self.mark,
                rank_env: &[],
            },
        );
        command
            .args(flags)
            // A secret of the agent's host that no rank may see.
            .env("AWS_SECRET_ACCESS_KEY", "the-agent-host-s-own");
        let log = self.root.join(format!("{file}.log"));
        self.agents.push(ChildProc::spawn(file, command, &log));
    }

    /// Sends `signal` to the agent started as `file`.
    pub fn signal_agent(&mut self, file: &str, signal: nix::sys::signal::Signal) {
        let agent = self.agents.iter_mut().find(|a| a.name == file);
        agent
            .unwrap_or_else(|| panic!("no agent {file}"))
            .signal_group(signal);
    }

    /// An agent's log so far.
    pub fn agent_log(&self, file: &str) -> String {
        std::fs::read_to_string(self.root.join(format!("{file}.log"))).unwrap_or_default()
    }
}

impl Drop for SecureCoordinator {
    fn drop(&mut self) {
        for agent in &mut self.agents {
            agent.signal_group(nix::sys::signal::Signal::SIGTERM);
            agent.wait_timeout(Duration::from_secs(10));
        }
        if let Some(p) = self.process.as_mut() {
            p.kill();
        }
        crate::procs::kill_groups(&crate::procs::rank_processes(&self.mark));
    }
}

/// `message` as a request carrying `authorization: Bearer <token>`.
pub fn authed<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    let value: MetadataValue<_> = format!("Bearer {token}").parse().expect("an ASCII token");
    request.metadata_mut().insert("authorization", value);
    request
}
