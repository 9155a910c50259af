//! Field paths as kube prints them (apimachinery's `field.Path`): names
//! joined by `.`, list items and map keys in brackets
//! (`spec.containers[0].image`, `data[key]`).

use std::fmt;

/// A field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Path(String);

impl Path {
    /// A path from its first field (`spec`, `metadata`, or `""` for the
    /// whole object).
    pub fn new(root: &str) -> Self {
        Path(root.to_string())
    }

    /// A field of this one.
    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() {
            Path(name.to_string())
        } else {
            Path(format!("{}.{name}", self.0))
        }
    }

    /// Several fields down.
    pub fn at(&self, names: &[&str]) -> Self {
        names.iter().fold(self.clone(), |p, n| p.child(n))
    }

    /// An item of this list.
    pub fn index(&self, i: usize) -> Self {
        Path(format!("{}[{i}]", self.0))
    }

    /// A value of this map.
    pub fn key(&self, k: &str) -> Self {
        Path(format!("{}[{k}]", self.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_print_as_kube_prints_them() {
        let spec = Path::new("spec");
        assert_eq!(
            spec.child("containers").index(0).child("image").as_str(),
            "spec.containers[0].image"
        );
        assert_eq!(Path::new("data").key("a.b").as_str(), "data[a.b]");
        assert_eq!(Path::new("").child("x").as_str(), "x");
        assert_eq!(
            spec.at(&["template", "metadata", "labels"]).as_str(),
            "spec.template.metadata.labels"
        );
    }
}
