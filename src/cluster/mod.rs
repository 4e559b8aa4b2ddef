//! The cluster's side of a run (`--kubeconfig`): kube-rs reads the kubeconfig as kubectl
//! does (contexts, client certificates, tokens, exec credential plugins, CA bundles,
//! proxies) and talks to the API server; this module only asks what a run needs. It is
//! read-only unless the operator asked to delete Node objects (`--delete-nodes`) or to
//! cordon and drain them (`--drain`, in `drain`).
//!
//! kube-rs is async and the run is threads: one small tokio runtime, owned here, drives
//! every request, and the methods below block on it, so nothing else in the crate knows
//! about async. The watch (`watch`) is one task on it for the whole run.

pub mod capacity;
pub mod drain;
mod error;
pub mod guard;
pub mod node_group;
pub mod node_state;
pub mod pod_state;
pub mod watch;

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::stage::error_chain;

pub use capacity::Capacity;
pub use error::{ClusterError, KubeconfigSource};
pub use guard::Guard;
pub use node_group::NodeGroup;
pub use node_state::NodeState;
pub use watch::{NodeWatch, Seen};

/// Which kubeconfig and context the operator chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    pub source: KubeconfigSource,
    /// `--context`; `None` for the kubeconfig's current-context.
    pub context: Option<String>,
}

impl Access {
    /// The kubeconfig the run uses: `--kubeconfig`, else the config file's `kubeconfig`,
    /// else `$KUBECONFIG` (non-empty); `None` when none is given, and then the run checks
    /// nothing in any cluster. kubectl's default `~/.kube/config` is never read on its
    /// own: verification is something the operator turns on.
    pub fn choose(
        command_line: Option<PathBuf>,
        config_file: Option<PathBuf>,
        environment: Option<String>,
        context: Option<String>,
    ) -> Option<Access> {
        let source = command_line
            .map(KubeconfigSource::CommandLine)
            .or(config_file.map(KubeconfigSource::ConfigFile))
            .or(environment
                .filter(|v| !v.is_empty())
                .map(KubeconfigSource::Environment))?;
        Some(Access { source, context })
    }

    /// [`Access::choose`] with this process's `$KUBECONFIG`: what a run and `batch
    /// status` use.
    pub fn of_process(
        command_line: Option<PathBuf>,
        config_file: Option<PathBuf>,
        context: Option<String>,
    ) -> Option<Access> {
        Access::choose(
            command_line,
            config_file,
            std::env::var("KUBECONFIG").ok(),
            context,
        )
    }
}

/// What [`Cluster::delete_node`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deleted {
    /// Deleted: the Node was this node's, as the sentence says.
    Deleted(String),
    /// The cluster has no Node of that name.
    Absent,
    /// Not deleted, nor anything else written: the Node is not this node's, as the
    /// sentence says.
    Refused(String),
}

/// `name` as it may go into an API path: a Node name, or a sentence why not. Validation
/// refuses other names already; this keeps any name that got past it (a `/`, `?` or `%`
/// would address another object) out of a request.
pub fn api_name(name: &str) -> Result<&str, String> {
    match crate::kube_name::problem(name) {
        None => Ok(name),
        Some(why) => Err(format!(
            "`{}` is not a Node name ({why}), so it was not put into a request",
            crate::node_text::escape_controls(name)
        )),
    }
}

impl Access {
    /// The kubeconfig as kube-rs reads it, and the context in use; a `--context` it does
    /// not have is refused. Reading runs nothing.
    fn read(&self) -> Result<(Kubeconfig, String), ClusterError> {
        let kubeconfig_error = |error: String| ClusterError::Kubeconfig {
            source_of: self.source.clone(),
            error,
        };
        let kubeconfig = match &self.source {
            KubeconfigSource::CommandLine(path) | KubeconfigSource::ConfigFile(path) => {
                Kubeconfig::read_from(path)
            }
            KubeconfigSource::Environment(_) => Kubeconfig::from_env()
                .and_then(|found| found.ok_or(kube::config::KubeconfigError::FindPath)),
        }
        .map_err(|e| kubeconfig_error(error_chain(&e)))?;
        let context = self
            .context
            .clone()
            .or_else(|| kubeconfig.current_context.clone())
            .unwrap_or_default();
        if let Some(wanted) = &self.context
            && !kubeconfig.contexts.iter().any(|c| &c.name == wanted)
        {
            let known: Vec<&str> = kubeconfig
                .contexts
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            return Err(kubeconfig_error(format!(
                "it has no context named {wanted} (it has: {})",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            )));
        }
        Ok((kubeconfig, context))
    }

    /// What the kubeconfig would do before its first request, read without running
    /// anything: the context in use, and the command its user runs on this machine for
    /// its credentials (an exec credential plugin, or an auth provider's `cmd-path`).
    pub fn inspect(&self) -> Result<Inspected, ClusterError> {
        let (kubeconfig, context) = self.read()?;
        let user = kubeconfig
            .contexts
            .iter()
            .find(|c| c.name == context)
            .and_then(|c| c.context.as_ref())
            .and_then(|c| c.user.clone());
        let auth = user.and_then(|user| {
            kubeconfig
                .auth_infos
                .iter()
                .find(|a| a.name == user)
                .and_then(|a| a.auth_info.clone())
        });
        let command = auth.and_then(|auth| {
            auth.exec.and_then(|exec| exec.command).or_else(|| {
                auth.auth_provider
                    .and_then(|p| p.config.get("cmd-path").cloned())
            })
        });
        Ok(Inspected {
            context,
            command: command.map(|c| crate::node_text::escape_controls(&c)),
        })
    }
}

/// What [`Access::inspect`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspected {
    /// The context in use (empty when the kubeconfig names none).
    pub context: String,
    /// The command the context's user runs for its credentials, escaped for messages.
    pub command: Option<String>,
}

/// How long one request to the API server may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// The namespace and secret `keadm gettoken` reads the join token from.
const TOKEN_NAMESPACE: &str = "kubeedge";
const TOKEN_SECRET: &str = "tokensecret";
const TOKEN_KEY: &str = "tokendata";

/// A client for the chosen cluster.
pub struct Cluster {
    runtime: tokio::runtime::Runtime,
    client: kube::Client,
    /// The same, without kube-rs's own retries of 429, 503 and 504 (up to 15, backing off
    /// to minutes): an eviction a PodDisruptionBudget refuses answers 429, and the drain
    /// retries it at its own pace, within its own deadline, naming the budget's message.
    client_once: kube::Client,
    /// The same with a read timeout past the watch's own: a watch is a request whose
    /// body stays quiet for as long as no Node changes, and [`REQUEST_TIMEOUT`] as its
    /// read timeout broke every quiet watch after 15 s (seen against a real
    /// kube-apiserver, which sends its first bookmark after about a minute).
    client_watch: kube::Client,
    /// The API server's URL, for messages and the plan.
    pub server: String,
    /// The context in use.
    pub context: String,
}

/// One permission the run needs, as an access review asks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permission {
    pub verb: &'static str,
    pub resource: &'static str,
    /// `eviction` of `pods`; `None` for the resource itself.
    pub subresource: Option<&'static str>,
    pub namespace: Option<&'static str>,
}

impl Permission {
    /// What verifying joins needs.
    pub const VERIFY: [Permission; 3] = [
        Permission::nodes("get"),
        Permission::nodes("list"),
        Permission::nodes("watch"),
    ];

    pub const fn nodes(verb: &'static str) -> Permission {
        Permission {
            verb,
            resource: "nodes",
            subresource: None,
            namespace: None,
        }
    }

    /// `get secrets` in the kubeedge namespace: the join token.
    pub const TOKEN: Permission = Permission {
        verb: "get",
        resource: "secrets",
        subresource: None,
        namespace: Some(TOKEN_NAMESPACE),
    };

    /// `get secrets in namespace kubeedge`, `create pods/eviction`.
    pub fn describe(&self) -> String {
        let resource = match self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.to_string(),
        };
        match self.namespace {
            Some(ns) => format!("{} {resource} in namespace {ns}", self.verb),
            None => format!("{} {resource}", self.verb),
        }
    }
}

impl Cluster {
    /// Reads the kubeconfig and makes the client. Nothing is sent yet.
    pub fn connect(access: &Access) -> Result<Cluster, ClusterError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("keadm-batch-cluster")
            .enable_all()
            .build()
            .map_err(|e| ClusterError::Kubeconfig {
                source_of: access.source.clone(),
                error: format!("could not start the client's runtime: {e}"),
            })?;
        let kubeconfig_error = |error: String| ClusterError::Kubeconfig {
            source_of: access.source.clone(),
            error,
        };
        let (kubeconfig, context) = access.read()?;
        let options = KubeConfigOptions {
            context: access.context.clone(),
            ..KubeConfigOptions::default()
        };
        let mut config = runtime
            .block_on(kube::Config::from_custom_kubeconfig(kubeconfig, &options))
            .map_err(|e| kubeconfig_error(error_chain(&e)))?;
        config.read_timeout = Some(REQUEST_TIMEOUT);
        config.connect_timeout = Some(REQUEST_TIMEOUT);
        let server = config.cluster_url.to_string();
        let mut once = config.clone();
        once.default_retry = false;
        let mut quiet = config.clone();
        quiet.read_timeout = Some(watch::READ_TIMEOUT);
        // The clients' connectors are made inside the runtime (hyper needs its reactor).
        let make = |config: kube::Config| {
            runtime
                .block_on(async { kube::Client::try_from(config) })
                .map_err(|e| ClusterError::Client {
                    source_of: access.source.clone(),
                    server: server.clone(),
                    error: error_chain(&e),
                })
        };
        let client = make(config)?;
        let client_once = make(once)?;
        let client_watch = make(quiet)?;
        Ok(Cluster {
            runtime,
            client,
            client_once,
            client_watch,
            server,
            context,
        })
    }

    fn api_error(&self, what: &str, err: &kube::Error) -> ClusterError {
        ClusterError::Api {
            server: self.server.clone(),
            what: what.to_string(),
            error: error_chain(err),
        }
    }

    /// The server's version (`GitVersion`): also proof that it answers at all.
    pub fn version(&self) -> Result<String, ClusterError> {
        self.runtime
            .block_on(self.client.apiserver_version())
            .map(|info| info.git_version)
            .map_err(|e| self.api_error("for its version", &e))
    }

    /// Asks the server, by access reviews, whether the kubeconfig's user has each of
    /// `permissions`; returns those it lacks.
    pub fn missing(&self, permissions: &[Permission]) -> Result<Vec<Permission>, ClusterError> {
        let api: Api<SelfSubjectAccessReview> = Api::all(self.client.clone());
        let mut missing = Vec::new();
        for permission in permissions {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        verb: Some(permission.verb.to_string()),
                        resource: Some(permission.resource.to_string()),
                        subresource: permission.subresource.map(str::to_string),
                        namespace: permission.namespace.map(str::to_string),
                        ..ResourceAttributes::default()
                    }),
                    ..SelfSubjectAccessReviewSpec::default()
                },
                ..SelfSubjectAccessReview::default()
            };
            let answer = self
                .runtime
                .block_on(api.create(&PostParams::default(), &review))
                .map_err(|e| {
                    self.api_error(&format!("whether it may {}", permission.describe()), &e)
                })?;
            if !answer.status.is_some_and(|s| s.allowed) {
                missing.push(*permission);
            }
        }
        Ok(missing)
    }

    /// Refuses, with the permissions missing, unless all of `permissions` are granted.
    pub fn require(&self, permissions: &[Permission]) -> Result<(), ClusterError> {
        let missing = self.missing(permissions)?;
        if missing.is_empty() {
            return Ok(());
        }
        let extra: Vec<String> = permissions
            .iter()
            .filter(|p| !Permission::VERIFY.contains(p))
            .map(Permission::describe)
            .collect();
        Err(ClusterError::Denied {
            server: self.server.clone(),
            denied: missing
                .iter()
                .map(Permission::describe)
                .collect::<Vec<_>>()
                .join(", "),
            more: if extra.is_empty() {
                String::new()
            } else {
                format!(", and this run also needs {}", extra.join(", "))
            },
        })
    }

    /// Every Node the cluster has now.
    pub fn nodes(&self) -> Result<Vec<NodeState>, ClusterError> {
        let api: Api<Node> = Api::all(self.client.clone());
        self.runtime
            .block_on(api.list(&ListParams::default()))
            .map(|list| list.items.iter().map(NodeState::of).collect())
            .map_err(|e| self.api_error("for its nodes", &e))
    }

    /// KubeEdge's NodeGroups, when the cluster has the CRD and the kubeconfig's user may
    /// list them; `None` otherwise (a cluster without NodeGroups, or a user who may not
    /// read them, has nothing to say about groups, and that is no error of the run's).
    pub fn node_groups(&self) -> Option<Vec<NodeGroup>> {
        let gvk = kube::api::GroupVersionKind::gvk("apps.kubeedge.io", "v1alpha1", "NodeGroup");
        let resource = kube::api::ApiResource::from_gvk_with_plural(&gvk, "nodegroups");
        let api: Api<kube::api::DynamicObject> = Api::all_with(self.client_once.clone(), &resource);
        match self.runtime.block_on(api.list(&ListParams::default())) {
            Ok(list) => Some(
                list.items
                    .iter()
                    .filter_map(|item| serde_json::to_value(item).ok())
                    .map(|object| NodeGroup::of(&object))
                    .collect(),
            ),
            Err(err) => {
                log::debug!("NodeGroups not read: {}", error_chain(&err));
                None
            }
        }
    }

    /// Deletes the Node `name` if `guard` finds it this node's, and only the object read
    /// (a precondition on its uid): the Node is read first, and nothing is written when
    /// it is not this node's.
    pub fn delete_node(&self, name: &str, guard: &Guard) -> Result<Deleted, ClusterError> {
        let what = format!("to delete the node {name}");
        let name = api_name(name).map_err(|error| ClusterError::Api {
            server: self.server.clone(),
            what: what.clone(),
            error,
        })?;
        if let Err(why) = guard.names(name) {
            return Ok(Deleted::Refused(why));
        }
        let api: Api<Node> = Api::all(self.client.clone());
        let Some(node) = self
            .runtime
            .block_on(api.get_opt(name))
            .map_err(|e| self.api_error(&format!("for the node {name}"), &e))?
        else {
            return Ok(Deleted::Absent);
        };
        let state = NodeState::of(&node);
        let this = match guard.check(&state) {
            Ok(this) => this,
            Err(why) => return Ok(Deleted::Refused(why)),
        };
        let params = DeleteParams {
            preconditions: state.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match self.runtime.block_on(api.delete(name, &params)) {
            Ok(_) => Ok(Deleted::Deleted(this)),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(Deleted::Absent),
            Err(e) => Err(self.api_error(&what, &e)),
        }
    }

    /// The join token as `keadm gettoken` reads it: `tokendata` of the `tokensecret`
    /// secret in the `kubeedge` namespace.
    pub fn join_token(&self) -> Result<String, ClusterError> {
        let api: Api<Secret> = Api::namespaced(self.client.clone(), TOKEN_NAMESPACE);
        let what =
            format!("for the join token (secret {TOKEN_SECRET} in namespace {TOKEN_NAMESPACE})");
        let secret = self
            .runtime
            .block_on(api.get(TOKEN_SECRET))
            .map_err(|e| self.api_error(&what, &e))?;
        let bytes = secret
            .data
            .as_ref()
            .and_then(|data| data.get(TOKEN_KEY))
            .map(|b| b.0.clone())
            .ok_or_else(|| ClusterError::Api {
                server: self.server.clone(),
                what: what.clone(),
                error: format!("the secret has no {TOKEN_KEY} (is cloudcore running?)"),
            })?;
        String::from_utf8(bytes)
            .map(|t| t.trim().to_string())
            .map_err(|_| ClusterError::Api {
                server: self.server.clone(),
                what,
                error: format!("its {TOKEN_KEY} is not text"),
            })
    }

    /// Starts the run's one watch on the cluster's Nodes.
    pub fn watch(&self) -> NodeWatch {
        NodeWatch::start(&self.runtime, self.client_watch.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A name that would address another path (`nodes/worker-1?x` is `nodes/worker-1`)
    /// never reaches a request.
    #[test]
    fn only_node_names_go_into_api_paths() {
        assert_eq!(api_name("edge-0"), Ok("edge-0"));
        for bad in ["worker-1?x", "a/b", "x%2Fy", "Edge", ""] {
            let error = api_name(bad).unwrap_err();
            assert!(error.contains("is not a Node name"), "{bad}: {error}");
        }
    }

    #[test]
    fn the_command_line_wins_then_the_config_then_the_environment() {
        let cli = Some(PathBuf::from("/a"));
        let file = Some(PathBuf::from("/b"));
        let env = Some("/c:/d".to_string());
        let source = |a: Option<Access>| a.map(|a| a.source);
        assert_eq!(
            source(Access::choose(cli.clone(), file.clone(), env.clone(), None)),
            Some(KubeconfigSource::CommandLine("/a".into()))
        );
        assert_eq!(
            source(Access::choose(None, file, env.clone(), None)),
            Some(KubeconfigSource::ConfigFile("/b".into()))
        );
        assert_eq!(
            source(Access::choose(None, None, env, None)),
            Some(KubeconfigSource::Environment("/c:/d".into()))
        );
        assert_eq!(Access::choose(None, None, Some(String::new()), None), None);
        assert_eq!(Access::choose(None, None, None, None), None);
    }
}
