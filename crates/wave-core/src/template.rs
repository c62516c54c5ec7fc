//! A workload's pod template as wave keeps it between events: small, whatever the template holds.
//!
//! ```text
//! object body ──► PodTemplateSpec (typed: a template that is not a pod template is refused)
//!                   ──► PodTemplate { annotations, scheduling gates   (decoded: read on every event)
//!                                     json                           (the whole template, compact) }
//!                   typed() ──► PodTemplateSpec again, for the few readers of the rest
//!                              (reference discovery, Reloader's container rules, the webhook's patch)
//! ```
//!
//! Why not keep the typed template: k8s-openapi's structs hold every field inline, so one `Container`
//! takes 2.6 KiB and one `Volume` 1.7 KiB before any field is set, and a one-container Deployment's
//! template about 7 KiB. Its compact JSON is the size of what it says, usually a few hundred bytes
//! (`docs/benchmarks.md`, "Where wave's memory goes"). Decoding it again costs microseconds, once per
//! watch event or reconcile that reads more than the decoded fields.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;

/// See the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodTemplate {
    /// `metadata.annotations` (the config hash, undo pins, Reloader's `last-reloaded-from`).
    annotations: BTreeMap<String, String>,
    /// `spec.schedulingGates[].name`.
    scheduling_gates: Vec<String>,
    /// The whole template as compact JSON; empty for an empty template.
    json: Box<str>,
}

impl PodTemplate {
    /// Keeps `template`. `Err` only if its JSON would not read back as a pod template, so that
    /// [`PodTemplate::typed`] never has to guess: such a workload is left alone like any unreadable one.
    pub fn new(template: PodTemplateSpec) -> Result<Self, serde_json::Error> {
        if template == PodTemplateSpec::default() {
            return Ok(Self::default());
        }
        let json = serde_json::to_string(&template)?;
        serde_json::from_str::<PodTemplateSpec>(&json)?;
        let annotations = template.metadata.and_then(|m| m.annotations).unwrap_or_default();
        let scheduling_gates = template
            .spec
            .and_then(|s| s.scheduling_gates)
            .unwrap_or_default()
            .into_iter()
            .map(|g| g.name)
            .collect();
        Ok(Self {
            annotations,
            scheduling_gates,
            json: json.into_boxed_str(),
        })
    }

    /// The whole template, decoded again.
    pub fn typed(&self) -> PodTemplateSpec {
        if self.json.is_empty() {
            return PodTemplateSpec::default();
        }
        // `new` read this JSON back before keeping it, and decoding is deterministic: this cannot fail.
        serde_json::from_str(&self.json).unwrap_or_default()
    }

    /// `metadata.annotations` (empty when it has none).
    pub fn annotations(&self) -> &BTreeMap<String, String> {
        &self.annotations
    }

    /// The value of the template annotation `key`.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.annotations.get(key).map(String::as_str)
    }

    /// Whether `text` occurs anywhere in the template's JSON: a cheap first look before decoding it,
    /// which a match must still confirm.
    pub fn mentions(&self, text: &str) -> bool {
        self.json.contains(text)
    }

    /// The names of `spec.schedulingGates`, in order.
    pub fn scheduling_gates(&self) -> &[String] {
        &self.scheduling_gates
    }

    /// Sets the template annotation `key` (the webhook puts back a config hash an update dropped).
    pub fn set_annotation(&mut self, key: &str, value: &str) {
        let mut spec = self.typed();
        spec.metadata
            .get_or_insert_with(Default::default)
            .annotations
            .get_or_insert_with(Default::default)
            .insert(key.to_string(), value.to_string());
        // The JSON came from a valid template and gained one string: it encodes again.
        if let Ok(changed) = Self::new(spec) {
            *self = changed;
        }
    }

    /// Changes the template through its typed form (tests build their workloads this way).
    #[cfg(test)]
    pub(crate) fn edit(&mut self, change: impl FnOnce(&mut PodTemplateSpec)) {
        let mut spec = self.typed();
        change(&mut spec);
        *self = Self::new(spec).expect("a typed template encodes");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn template_of(value: serde_json::Value) -> PodTemplateSpec {
        serde_json::from_value(value).expect("a pod template")
    }

    #[test]
    fn a_kept_template_decodes_to_the_template_it_was_given() {
        let template = template_of(json!({
            "metadata": {"labels": {"app": "web"}, "annotations": {"a": "1"}},
            "spec": {
                "schedulingGates": [{"name": "one"}, {"name": "two"}],
                "volumes": [{"name": "v", "projected": {"sources": [{"secret": {"name": "s", "items": [{"key": "k", "path": "p"}]}}]}}],
                "containers": [{
                    "name": "app", "image": "app:1",
                    "resources": {"limits": {"cpu": "500m", "memory": "1Gi"}},
                    "ports": [{"containerPort": 8080}],
                    "livenessProbe": {"httpGet": {"path": "/", "port": "http"}},
                    "env": [{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "x", "optional": true}}}],
                    "envFrom": [{"secretRef": {"name": "s"}}]
                }]
            }
        }));
        let kept = PodTemplate::new(template.clone()).unwrap();
        assert_eq!(kept.typed(), template);
        assert_eq!(kept.annotation("a"), Some("1"));
        assert_eq!(kept.scheduling_gates(), ["one", "two"]);
    }

    #[test]
    fn a_kept_template_is_a_fraction_of_the_typed_one() {
        let template = template_of(json!({"spec": {
            "volumes": [{"name": "v", "configMap": {"name": "cm"}}],
            "containers": [{"name": "app", "image": "app:1", "envFrom": [{"secretRef": {"name": "s"}}]}]
        }}));
        let kept = PodTemplate::new(template).unwrap();
        let typed_size = std::mem::size_of::<k8s_openapi::api::core::v1::Container>()
            + std::mem::size_of::<k8s_openapi::api::core::v1::Volume>();
        assert!(
            kept.json.len() * 10 < typed_size,
            "{} bytes of JSON",
            kept.json.len()
        );
    }

    #[test]
    fn an_empty_template_keeps_nothing() {
        let kept = PodTemplate::new(PodTemplateSpec::default()).unwrap();
        assert!(kept.json.is_empty());
        assert_eq!(kept.typed(), PodTemplateSpec::default());
        assert!(kept.annotations().is_empty() && kept.scheduling_gates().is_empty());
    }

    #[test]
    fn editing_a_template_keeps_its_decoded_fields_in_step() {
        let mut kept = PodTemplate::default();
        kept.edit(|t| {
            t.metadata.get_or_insert_with(Default::default).annotations =
                Some([("h".to_string(), "v".to_string())].into());
        });
        assert_eq!(kept.annotation("h"), Some("v"));
        assert_eq!(
            kept.typed().metadata.and_then(|m| m.annotations).unwrap()["h"],
            "v"
        );
    }
}
