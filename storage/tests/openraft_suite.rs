//! openraft's storage conformance suite against kubestore's log store and
//! state machine.

use kubestore_storage::{LogStore, StateMachine, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;

struct TempStoreBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for TempStoreBuilder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<u64>> {
        let dir = tempfile::tempdir().expect("temp dir");
        let (log, sm, _store) = kubestore_storage::open(dir.path()).expect("open storage");
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    if let Err(e) = Suite::test_all(TempStoreBuilder) {
        panic!("openraft storage suite failed: {e}");
    }
}
