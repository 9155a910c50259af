//! What a custom type's entry in the type table carries beyond what every
//! type has ([`CustomType`]): its definition's name, schema (raw, parsed
//! as a structural schema, and as the typed-schema table), printer
//! columns, selectable fields, scale paths and deprecation. `kube::crd`
//! builds these from CustomResourceDefinitions; the table only holds
//! them, so it depends on the schema modules and not on `kube::crd`.

use serde_json::Value;

use crate::kube::structural::StructuralSchema;
use crate::kube::types::Schema;

/// What a definition says of one served version beyond what every type
/// has.
#[derive(Debug)]
pub struct CustomType {
    /// The definition's name (`<plural>.<group>`).
    pub definition: String,
    /// This version is the storage version.
    pub storage: bool,
    /// `schema.openAPIV3Schema`, when the version has one.
    pub schema: Option<Value>,
    /// The schema parsed: what prunes, defaults and validates the type's
    /// objects (`None`: no schema, or one the definition's validation
    /// would refuse, written before it or through the etcd API: objects
    /// are then kept as written).
    pub structural: Option<StructuralSchema>,
    /// The schema as the typed-schema table server-side apply and field
    /// validation read (`None` without a structural schema).
    pub type_schema: Option<Schema>,
    /// `additionalPrinterColumns`.
    pub printer_columns: Vec<PrinterColumn>,
    /// `selectableFields[].jsonPath`, without the leading dot
    /// (`spec.color`).
    pub selectable_fields: Vec<String>,
    /// The `scale` subresource's paths, when it has one.
    pub scale: Option<ScalePaths>,
    /// The warning every request to a deprecated version answers with.
    pub deprecation_warning: Option<String>,
    /// The definition's `metadata.uid`, to tell a definition deleted and
    /// written again from the one before.
    pub uid: String,
}

impl PartialEq for CustomType {
    /// Equal definitions: the parsed schemas follow from `schema`.
    fn eq(&self, other: &Self) -> bool {
        self.definition == other.definition
            && self.uid == other.uid
            && self.storage == other.storage
            && self.schema == other.schema
            && self.printer_columns == other.printer_columns
            && self.selectable_fields == other.selectable_fields
            && self.scale == other.scale
            && self.deprecation_warning == other.deprecation_warning
    }
}

impl Eq for CustomType {}

/// One `additionalPrinterColumns` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrinterColumn {
    pub name: String,
    /// `integer`, `number`, `string`, `boolean` or `date`.
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    /// A simple JSON path (`.spec.replicas`).
    pub json_path: String,
}

/// Where a custom type's `scale` subresource reads and writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    /// `.spec.replicas`.
    pub spec_replicas: String,
    /// `.status.replicas`.
    pub status_replicas: String,
    /// `.status.selector`, when set.
    pub label_selector: Option<String>,
}
