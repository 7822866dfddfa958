//! Where the Lease lives: the API server in production, memory in the election's unit tests.

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use std::future::Future;

/// Read and conditionally write one Lease.
pub(crate) trait LeaseStore: Send + Sync {
    /// The Lease, None when it does not exist.
    fn get(&self) -> impl Future<Output = Result<Option<Lease>, kube::Error>> + Send;
    /// Creates (`create`) or replaces the Lease; the resourceVersion inside makes a replace
    /// conditional. Ok(false) when another writer won (409).
    fn write(
        &self,
        lease: Lease,
        create: bool,
    ) -> impl Future<Output = Result<bool, kube::Error>> + Send;
}

/// The Lease `name` through the API server.
pub(crate) struct KubeLease {
    /// Lease API of its namespace.
    pub api: Api<Lease>,
    /// Lease name.
    pub name: String,
}

impl LeaseStore for KubeLease {
    async fn get(&self) -> Result<Option<Lease>, kube::Error> {
        self.api.get_opt(&self.name).await
    }

    async fn write(&self, lease: Lease, create: bool) -> Result<bool, kube::Error> {
        let res = if create {
            self.api.create(&PostParams::default(), &lease).await
        } else {
            self.api
                .replace(&self.name, &PostParams::default(), &lease)
                .await
        };
        match res {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}
