//! The one table of what every RPC needs (deny by default: a method missing
//! here is refused, and a test fails when an RPC of the API is missing).
//! Health and reflection are open: they hold no tenant data.

use crate::model::Role;

/// What a call needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// Read the caller's team's trainings (and theirs alone), the fleet, alerts.
    Read,
    /// Create and cancel the caller's team's trainings.
    Write,
    /// Manage the caller's team's tokens; read its audit log.
    TeamAdmin,
    /// Anything of any team; quotas.
    ClusterAdmin,
    /// An agent's stream: a client certificate, no role.
    Agent,
    /// Anyone with a valid token (who am I).
    Authenticated,
}

impl Permission {
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Write => "write",
            Permission::TeamAdmin => "team-admin",
            Permission::ClusterAdmin => "cluster-admin",
            Permission::Agent => "agent",
            Permission::Authenticated => "authenticated",
        }
    }

    /// Whether `role` carries this permission.
    pub fn granted_to(self, role: Role) -> bool {
        match self {
            Permission::Authenticated | Permission::Read => true,
            Permission::Write => role >= Role::Editor,
            Permission::TeamAdmin => role >= Role::Admin,
            Permission::ClusterAdmin => role >= Role::ClusterAdmin,
            Permission::Agent => false,
        }
    }
}

/// Every RPC of the API and what it needs (team scoping is the handler's:
/// a viewer may read, but only its team's trainings).
pub const METHODS: &[(&str, Permission)] = &[
    (
        "/cohort.v1.TrainingService/CreateTraining",
        Permission::Write,
    ),
    ("/cohort.v1.TrainingService/GetTraining", Permission::Read),
    ("/cohort.v1.TrainingService/ListTrainings", Permission::Read),
    (
        "/cohort.v1.TrainingService/CancelTraining",
        Permission::Write,
    ),
    ("/cohort.v1.TrainingService/WatchTraining", Permission::Read),
    ("/cohort.v1.TrainingService/WatchLogs", Permission::Read),
    ("/cohort.v1.TrainingService/UploadCode", Permission::Write),
    ("/cohort.v1.TrainingService/GetCode", Permission::Read),
    (
        "/cohort.v1.TrainingService/ParseTrainingConfig",
        Permission::Read,
    ),
    (
        "/cohort.v1.TrainingService/ListPriorityClasses",
        Permission::Read,
    ),
    (
        "/cohort.v1.TrainingService/ListCheckpoints",
        Permission::Read,
    ),
    (
        "/cohort.v1.TrainingService/DownloadCheckpoint",
        Permission::Read,
    ),
    (
        "/cohort.v1.TrainingService/GetTrainingReport",
        Permission::Read,
    ),
    ("/cohort.v1.SweepService/CreateSweep", Permission::Write),
    ("/cohort.v1.SweepService/GetSweep", Permission::Read),
    ("/cohort.v1.SweepService/ListSweeps", Permission::Read),
    ("/cohort.v1.SweepService/CancelSweep", Permission::Write),
    ("/cohort.v1.GpuService/ListGpus", Permission::Read),
    ("/cohort.v1.GpuService/RecommendGpus", Permission::Read),
    (
        "/cohort.v1.GpuService/ValidateGpuSelection",
        Permission::Read,
    ),
    ("/cohort.v1.GpuService/EstimateMemory", Permission::Read),
    (
        "/cohort.v1.TelemetryService/WatchGpuMetrics",
        Permission::Read,
    ),
    (
        "/cohort.v1.TelemetryService/QueryGpuMetrics",
        Permission::Read,
    ),
    ("/cohort.v1.TelemetryService/WatchAlerts", Permission::Read),
    ("/cohort.v1.AgentService/Connect", Permission::Agent),
    ("/cohort.v1.AgentService/FetchCheckpoint", Permission::Agent),
    ("/cohort.v1.AgentService/FetchCode", Permission::Agent),
    ("/cohort.v1.AgentService/ListAgents", Permission::Read),
    (
        "/cohort.v1.AgentService/RunDoctor",
        Permission::ClusterAdmin,
    ),
    (
        "/cohort.v1.AgentService/CordonAgent",
        Permission::ClusterAdmin,
    ),
    (
        "/cohort.v1.AgentService/UncordonAgent",
        Permission::ClusterAdmin,
    ),
    (
        "/cohort.v1.AgentService/DrainAgent",
        Permission::ClusterAdmin,
    ),
    ("/cohort.v1.GpuService/ReleaseGpu", Permission::ClusterAdmin),
    ("/cohort.v1.AdminService/CreateToken", Permission::TeamAdmin),
    ("/cohort.v1.AdminService/ListTokens", Permission::TeamAdmin),
    ("/cohort.v1.AdminService/RevokeToken", Permission::TeamAdmin),
    ("/cohort.v1.AdminService/SetQuota", Permission::ClusterAdmin),
    ("/cohort.v1.AdminService/ListQuotas", Permission::Read),
    (
        "/cohort.v1.AdminService/ListAuditEvents",
        Permission::TeamAdmin,
    ),
    ("/cohort.v1.AdminService/WhoAmI", Permission::Authenticated),
    (
        "/cohort.v1.AdminService/ForgetAgent",
        Permission::ClusterAdmin,
    ),
    ("/cohort.v1.AdminService/AddWebhook", Permission::TeamAdmin),
    (
        "/cohort.v1.AdminService/ListWebhooks",
        Permission::TeamAdmin,
    ),
    (
        "/cohort.v1.AdminService/RemoveWebhook",
        Permission::TeamAdmin,
    ),
];

/// The RPCs that change something: each success writes its audit row in its
/// own transaction, each failure one of its own (the layer's).
pub const MUTATING: &[&str] = &[
    "/cohort.v1.TrainingService/CreateTraining",
    "/cohort.v1.TrainingService/CancelTraining",
    "/cohort.v1.SweepService/CreateSweep",
    "/cohort.v1.SweepService/CancelSweep",
    "/cohort.v1.AdminService/CreateToken",
    "/cohort.v1.AdminService/RevokeToken",
    "/cohort.v1.AdminService/SetQuota",
    "/cohort.v1.AdminService/ForgetAgent",
    "/cohort.v1.AdminService/AddWebhook",
    "/cohort.v1.AdminService/RemoveWebhook",
    "/cohort.v1.AgentService/RunDoctor",
    "/cohort.v1.AgentService/CordonAgent",
    "/cohort.v1.AgentService/UncordonAgent",
    "/cohort.v1.AgentService/DrainAgent",
    "/cohort.v1.GpuService/ReleaseGpu",
];

/// Services anyone may call: they hold no tenant data.
pub const OPEN_SERVICES: &[&str] = &[
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1.ServerReflection/",
    "/grpc.reflection.v1alpha.ServerReflection/",
];

/// What a call to `path` (`/pkg.Service/Method`) needs: `None` for an open
/// service; `Some(None)` for a path the table does not know (refused).
pub fn required(path: &str) -> Option<Option<Permission>> {
    if OPEN_SERVICES.iter().any(|open| path.starts_with(open)) {
        return None;
    }
    Some(
        METHODS
            .iter()
            .find(|(method, _)| *method == path)
            .map(|(_, p)| *p),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn every_rpc_of_the_api_is_in_the_table_and_nothing_else() {
        let fds =
            prost_types::FileDescriptorSet::decode(cohort_proto::FILE_DESCRIPTOR_SET).unwrap();
        let mut api: Vec<String> = fds
            .file
            .iter()
            .filter(|f| f.package() == "cohort.v1")
            .flat_map(|f| {
                f.service.iter().flat_map(|s| {
                    s.method
                        .iter()
                        .map(move |m| format!("/cohort.v1.{}/{}", s.name(), m.name()))
                })
            })
            .collect();
        api.sort();
        let mut table: Vec<String> = METHODS.iter().map(|(m, _)| m.to_string()).collect();
        table.sort();
        assert_eq!(api, table, "every RPC needs a row of METHODS");
    }

    #[test]
    fn mutating_rpcs_are_in_the_table_and_need_more_than_read() {
        for m in MUTATING {
            let p = required(m).flatten().expect("in the table");
            assert!(!p.granted_to(Role::Viewer), "{m}");
        }
    }

    #[test]
    fn roles_carry_their_permissions_and_unknown_paths_are_refused() {
        use Permission::*;
        assert!(Read.granted_to(Role::Viewer) && !Write.granted_to(Role::Viewer));
        assert!(Write.granted_to(Role::Editor) && !TeamAdmin.granted_to(Role::Editor));
        assert!(TeamAdmin.granted_to(Role::Admin) && !ClusterAdmin.granted_to(Role::Admin));
        assert!(ClusterAdmin.granted_to(Role::ClusterAdmin));
        assert!(Role::ALL.iter().all(|r| !Agent.granted_to(*r)));
        assert_eq!(required("/grpc.health.v1.Health/Check"), None);
        assert_eq!(required("/cohort.v1.TrainingService/Nope"), Some(None));
        assert_eq!(
            required("/cohort.v1.TrainingService/CancelTraining"),
            Some(Some(Write))
        );
    }
}
