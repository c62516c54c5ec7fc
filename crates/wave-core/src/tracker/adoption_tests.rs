use serde_json::json;

use crate::names;
use crate::refs::CrossNamespace;
use crate::tracker::testing::*;
use crate::tracker::*;
use crate::workload::WorkloadKind;
use crate::workload::testing::deployment;

#[test]
fn a_deployment_an_opted_in_rollout_takes_its_template_from_is_acted_on_in_its_place() {
    let rollouts = Scope {
        resource: Resource::Workload(WorkloadKind::ROLLOUT),
        namespace: None,
    };
    let mut rollout = deployment("ns", "ro", &[(names::EXTRA_CONFIGMAPS, "extra")], json!({}));
    rollout.id.kind = WorkloadKind::ROLLOUT;
    rollout.template_from = Some("web".into());
    let mut web = uses_cm("web", "cm");
    web.annotations.clear();
    let kinds = [WorkloadKind::DEPLOYMENT, WorkloadKind::ROLLOUT];
    let mut t = Tracker::new(&kinds, None);
    for s in t.scopes().to_vec() {
        t.apply(match s.resource {
            Resource::Workload(_) => Change::Workload(s.clone(), Event::Init),
            _ => Change::Config(s.clone(), Event::Init),
        });
        t.apply(match s.resource {
            Resource::Workload(_) => Change::Workload(s.clone(), Event::InitDone),
            _ => Change::Config(s.clone(), Event::InitDone),
        });
    }
    let fx = t.apply(Change::Workload(scope(DEPLOYMENTS), Event::Apply(web.clone())));
    assert!(fx.enqueue.is_empty(), "not opted in on its own");
    let fx = t.apply(Change::Workload(rollouts.clone(), Event::Apply(rollout.clone())));
    assert_eq!(
        names_of(&fx),
        ["web"],
        "the Rollout's opt-in brings its Deployment in"
    );
    let view = t.workload(&web.id).unwrap();
    assert!(view.is_opted_in());
    assert_eq!(
        view.references(CrossNamespace::Allow).keys().len(),
        2,
        "its own reference and the Rollout's extra"
    );
    assert!(
        !t.workload(&rollout.id).unwrap().is_opted_in(),
        "nothing is written to the Rollout"
    );
    let fx = t.apply(Change::Config(
        scope(CONFIGMAPS),
        Event::Apply(cm_meta("extra", "1")),
    ));
    assert_eq!(names_of(&fx), ["web"]);
    t.apply(Change::Workload(rollouts, Event::Delete(rollout)));
    assert!(
        !t.workload(&web.id).unwrap().is_opted_in(),
        "released with the Rollout"
    );
    let fx = t.apply(Change::Config(
        scope(CONFIGMAPS),
        Event::Apply(cm_meta("extra", "2")),
    ));
    assert!(fx.enqueue.is_empty());
}
