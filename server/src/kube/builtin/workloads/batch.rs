//! The batch/v1 workloads (`pkg/apis/batch/validation`): a job's
//! generated selector and labels, its counts, modes and template
//! (restarting `OnFailure` or `Never`), what an update may change, and a
//! cron job's schedule as robfig/cron reads it.

use serde_json::{json, Map, Value};

use super::super::pod::{self, enum_field};
use super::super::{empty, has, int, obj, obj_entry, text, Path};
use super::selector::{label_selector, selector_match, selector_value, template_labels};
use super::{nonnegative, spec_of, template_spec};
use crate::kube::error::{BadValue, FieldCause};
use crate::kube::objectmeta::FIELD_IMMUTABLE;

/// The job labels kube's job strategy puts on the template (the legacy
/// name and uid labels, and the prefixed ones).
const JOB_NAME_LABELS: [&str; 2] = ["job-name", "batch.kubernetes.io/job-name"];
const JOB_UID_LABELS: [&str; 2] = ["controller-uid", "batch.kubernetes.io/controller-uid"];
const JOB_UID_SELECTOR: &str = "batch.kubernetes.io/controller-uid";

/// kube's `generateSelector`, unless `spec.manualSelector`: the job's
/// name and uid as template labels, its uid as the selector.
pub(super) fn generate_job_selector(job: &mut Map<String, Value>) {
    let meta = obj(job, "metadata");
    let name = meta.map_or("", |m| text(m, "name")).to_string();
    let uid = meta.map_or("", |m| text(m, "uid")).to_string();
    let Some(spec) = obj_entry(job, "spec") else {
        return;
    };
    if spec.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        return;
    }
    if let Some(labels) = obj_entry(spec, "template")
        .and_then(|t| obj_entry(t, "metadata"))
        .and_then(|m| obj_entry(m, "labels"))
    {
        for key in JOB_NAME_LABELS {
            labels.entry(key).or_insert_with(|| json!(name));
        }
        for key in JOB_UID_LABELS {
            labels.entry(key).or_insert_with(|| json!(uid));
        }
    }
    if let Some(match_labels) =
        obj_entry(spec, "selector").and_then(|s| obj_entry(s, "matchLabels"))
    {
        match_labels
            .entry(JOB_UID_SELECTOR)
            .or_insert_with(|| json!(uid));
    }
}

/// `validateGeneratedSelector`: a job whose selector the server generates
/// carries it, with the uid, on its template and selector.
pub(super) fn generated_selector(job: &Map<String, Value>) -> Vec<FieldCause> {
    let spec = spec_of(job);
    if spec.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        return Vec::new();
    }
    let path = Path::new("spec");
    let Some(labels) = template_labels(spec) else {
        return vec![FieldCause::required(
            path.at(&["template", "metadata", "labels"]).as_str(),
            "",
        )];
    };
    let uid = obj(job, "metadata").map_or("", |m| text(m, "uid"));
    let mut causes = Vec::new();
    for key in JOB_UID_LABELS {
        if let Some(v) = labels
            .get(key)
            .and_then(Value::as_str)
            .filter(|v| *v != uid)
        {
            causes.push(FieldCause::invalid(
                path.at(&["template", "metadata", "labels"])
                    .key(key)
                    .as_str(),
                v,
                &format!("must be '{uid}'"),
            ));
        }
    }
    if let Some(sel) = obj(spec, "selector") {
        let generated = obj(sel, "matchLabels")
            .and_then(|m| m.get(JOB_UID_SELECTOR))
            .and_then(Value::as_str)
            == Some(uid);
        if !generated {
            causes.push(FieldCause::invalid_value(
                path.child("selector").as_str(),
                BadValue::label_selector(selector_value(spec)),
                "`selector` not auto-generated",
            ));
        }
    }
    causes
}

/// `ValidateJobSpec`: `validateJobSpec` and a selector that is there and
/// matches the template.
pub(super) fn job_spec(spec: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
    let mut causes = job_template_spec(spec, path);
    match obj(spec, "selector") {
        None => causes.push(FieldCause::required(path.child("selector").as_str(), "")),
        Some(sel) => causes.extend(label_selector(sel, &path.child("selector"))),
    }
    if obj(spec, "selector")
        .is_none_or(|sel| label_selector(sel, &path.child("selector")).is_empty())
    {
        causes.extend(selector_match(spec, path, false));
    }
    causes
}

/// `validateJobSpec`: counts, modes and the template (restarting
/// `OnFailure` or `Never`).
fn job_template_spec(spec: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    for key in [
        "parallelism",
        "completions",
        "activeDeadlineSeconds",
        "backoffLimit",
        "ttlSecondsAfterFinished",
    ] {
        causes.extend(nonnegative(spec, key, path));
    }
    if has(spec, "completionMode") {
        let mode = text(spec, "completionMode");
        if mode != "NonIndexed" && mode != "Indexed" {
            causes.push(FieldCause::not_supported(
                path.child("completionMode").as_str(),
                mode,
                &["NonIndexed", "Indexed"],
            ));
        }
        if mode == "Indexed" && !has(spec, "completions") {
            causes.push(FieldCause::required(
                path.child("completions").as_str(),
                "when completion mode is Indexed",
            ));
        }
    }
    causes.extend(pod::validate_template(
        obj(spec, "template"),
        &path.child("template"),
    ));
    let policy = text(template_spec(spec), "restartPolicy");
    let at = path.at(&["template", "spec", "restartPolicy"]);
    if policy == "Always" || policy.is_empty() {
        causes.push(FieldCause::required(
            at.as_str(),
            "valid values: \"OnFailure\", \"Never\"",
        ));
    } else if policy != "OnFailure" && policy != "Never" {
        causes.push(FieldCause::not_supported(
            at.as_str(),
            policy,
            &["OnFailure", "Never"],
        ));
    }
    causes
}

/// `ValidateJobSpecUpdate`: completions (an indexed job's only with its
/// parallelism), the selector, the template (but a suspended job that
/// never started may change its scheduling directives), the completion
/// mode and failure policies immutable.
pub(super) fn job_update(
    old: &Map<String, Value>,
    new: &Map<String, Value>,
    path: &Path,
) -> Vec<FieldCause> {
    let (old_spec, new_spec) = (spec_of(old), spec_of(new));
    let mut causes = Vec::new();
    let immutable = |key: &str| -> Option<FieldCause> {
        let (a, b) = (
            old_spec.get(key).filter(|v| !v.is_null()),
            new_spec.get(key).filter(|v| !v.is_null()),
        );
        (a != b).then(|| {
            let shown = b.map_or(BadValue::Str("null".into()), BadValue::of_json);
            FieldCause::invalid_value(path.child(key).as_str(), shown, FIELD_IMMUTABLE)
        })
    };
    let indexed = text(new_spec, "completionMode") == "Indexed";
    if !indexed {
        causes.extend(immutable("completions"));
    } else if old_spec.get("completions") != new_spec.get("completions") {
        if let Some(completions) = int(new_spec, "completions") {
            if Some(completions) != int(new_spec, "parallelism") {
                causes.push(FieldCause::invalid_value(
                    path.child("completions").as_str(),
                    BadValue::Int(completions),
                    "can only be modified in tandem with spec.parallelism",
                ));
            }
        }
    }
    if selector_value(old_spec) != selector_value(new_spec) {
        causes.push(FieldCause::invalid_value(
            path.child("selector").as_str(),
            BadValue::label_selector(selector_value(new_spec)),
            FIELD_IMMUTABLE,
        ));
    }
    let suspended = new_spec.get("suspend").and_then(Value::as_bool) == Some(true);
    let started = obj(old, "status").is_some_and(|s| has(s, "startTime"));
    let mut old_template = obj(old_spec, "template").cloned().unwrap_or_default();
    let new_template = obj(new_spec, "template").cloned().unwrap_or_default();
    if suspended && !started {
        // Scheduling directives of a job that has not started yet.
        for key in ["labels", "annotations"] {
            let new_value = obj(&new_template, "metadata")
                .and_then(|m| m.get(key))
                .cloned();
            if let Some(meta) = obj_entry(&mut old_template, "metadata") {
                match new_value {
                    Some(v) => meta.insert(key.into(), v),
                    None => meta.remove(key),
                };
            }
        }
        let new_pod = obj(&new_template, "spec").cloned().unwrap_or_default();
        if let Some(pod) = obj_entry(&mut old_template, "spec") {
            for key in ["nodeSelector", "tolerations", "schedulingGates", "affinity"] {
                match new_pod.get(key) {
                    Some(v) => pod.insert(key.into(), v.clone()),
                    None => pod.remove(key),
                };
            }
        }
    }
    if old_template != new_template {
        causes.push(FieldCause::invalid_value(
            path.child("template").as_str(),
            BadValue::Go(Value::Object(new_template).to_string()),
            FIELD_IMMUTABLE,
        ));
    }
    for key in ["completionMode", "podFailurePolicy", "backoffLimitPerIndex"] {
        causes.extend(immutable(key));
    }
    causes
}

/// `validateCronJobSpec`.
pub(super) fn cron_job(spec: &Map<String, Value>, path: &Path) -> Vec<FieldCause> {
    let mut causes = Vec::new();
    let schedule = text(spec, "schedule");
    let at = path.child("schedule");
    if schedule.is_empty() {
        causes.push(FieldCause::required(at.as_str(), ""));
    } else {
        if let Err(e) = parse_cron(schedule) {
            causes.push(FieldCause::invalid(at.as_str(), schedule, &e));
        }
        if schedule.contains("TZ") {
            causes.push(FieldCause::invalid(
                at.as_str(),
                schedule,
                "cannot use TZ or CRON_TZ in schedule, use timeZone field instead",
            ));
        }
    }
    causes.extend(nonnegative(spec, "startingDeadlineSeconds", path));
    causes.extend(enum_field(
        spec,
        "concurrencyPolicy",
        &["Allow", "Forbid", "Replace"],
        path,
    ));
    let template = obj(spec, "jobTemplate").unwrap_or(empty());
    let template_path = path.child("jobTemplate");
    let job = obj(template, "spec").unwrap_or(empty());
    causes.extend(job_template_spec(job, &template_path.child("spec")));
    if let Some(sel) = job.get("selector").filter(|v| !v.is_null()) {
        causes.push(FieldCause::invalid_value(
            template_path.at(&["spec", "selector"]).as_str(),
            BadValue::label_selector(Some(sel)),
            "`selector` will be auto-generated",
        ));
    }
    if job.get("manualSelector").and_then(Value::as_bool) == Some(true) {
        causes.push(FieldCause::not_supported_value(
            template_path.at(&["spec", "manualSelector"]).as_str(),
            BadValue::Bool(true),
            &["nil", "false"],
        ));
    }
    causes.extend(nonnegative(spec, "successfulJobsHistoryLimit", path));
    causes.extend(nonnegative(spec, "failedJobsHistoryLimit", path));
    causes
}

/// A standard cron schedule as robfig/cron's `ParseStandard` reads it:
/// a descriptor (`@hourly`, `@every 1h`, ...) or five fields (minute,
/// hour, day of month, month, day of week), each `*`, `?`, values and
/// ranges with steps, separated by commas; errors in its words.
fn parse_cron(schedule: &str) -> Result<(), String> {
    let spec = schedule.trim();
    if let Some(descriptor) = spec.strip_prefix('@') {
        return match descriptor {
            "yearly" | "annually" | "monthly" | "weekly" | "daily" | "midnight" | "hourly" => {
                Ok(())
            }
            d if d.starts_with("every ") => Ok(()),
            _ => Err(format!("unrecognized descriptor: {spec}")),
        };
    }
    let fields: Vec<&str> = spec.split_whitespace().collect();
    if fields.len() != 5 {
        return Err(format!(
            "expected exactly 5 fields, found {}: [{}]",
            fields.len(),
            fields.join(" ")
        ));
    }
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];
    let bounds: [(i64, i64, &[&str], i64); 5] = [
        (0, 59, &[], 0),
        (0, 23, &[], 0),
        (1, 31, &[], 0),
        (1, 12, &MONTHS, 1),
        (0, 6, &DAYS, 0),
    ];
    for (field, (min, max, names, base)) in fields.iter().zip(bounds) {
        for range in field.split(',') {
            cron_range(range, min, max, names, base)?;
        }
    }
    Ok(())
}

fn cron_range(expr: &str, min: i64, max: i64, names: &[&str], base: i64) -> Result<(), String> {
    let parts: Vec<&str> = expr.split('/').collect();
    if parts.len() > 2 {
        return Err(format!("too many slashes: {expr}"));
    }
    let low_high: Vec<&str> = parts[0].split('-').collect();
    if low_high.len() > 2 {
        return Err(format!("too many hyphens: {expr}"));
    }
    let value = |s: &str| -> Result<i64, String> {
        if let Some(i) = names.iter().position(|n| n.eq_ignore_ascii_case(s)) {
            return Ok(i as i64 + base);
        }
        s.parse::<i64>().map_err(|_| {
            format!("failed to parse int from {s}: strconv.Atoi: parsing \"{s}\": invalid syntax")
        })
    };
    let (start, end) = if low_high[0] == "*" || low_high[0] == "?" {
        (min, max)
    } else {
        let start = value(low_high[0])?;
        let end = match low_high.get(1) {
            Some(e) => value(e)?,
            None => start,
        };
        (start, end)
    };
    if let Some(step) = parts.get(1) {
        let step = value(step)?;
        if step <= 0 {
            return Err(format!("step of range should be a positive number: {expr}"));
        }
    }
    if start < min {
        return Err(format!(
            "beginning of range ({start}) below minimum ({min}): {expr}"
        ));
    }
    if end > max {
        return Err(format!(
            "end of range ({end}) above maximum ({max}): {expr}"
        ));
    }
    if start > end {
        return Err(format!(
            "beginning of range ({start}) beyond end of range ({end}): {expr}"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_schedules_parse_as_robfig_cron_reads_them() {
        for ok in [
            "*/5 * * * *",
            "0 0 1 jan-mar mon,fri",
            "@hourly",
            "@every 1h30m",
            "0-59/15 9-17 * * 1-5",
        ] {
            assert!(parse_cron(ok).is_ok(), "{ok}");
        }
        assert_eq!(
            parse_cron("* * *"),
            Err("expected exactly 5 fields, found 3: [* * *]".into())
        );
        assert_eq!(
            parse_cron("61 * * * *"),
            Err("end of range (61) above maximum (59): 61".into())
        );
        assert_eq!(
            parse_cron("@sometimes"),
            Err("unrecognized descriptor: @sometimes".into())
        );
        assert!(parse_cron("x * * * *")
            .expect_err("not a number")
            .starts_with("failed to parse int from x"));
    }
}
