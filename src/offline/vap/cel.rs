//! The CEL of the exported ValidatingAdmissionPolicy: its variables (what a
//! write removes, who may remove it, the override), its message and audit
//! annotations, and the literals every string from the policy goes through.

use std::collections::BTreeMap;
use std::fmt::Write;

use k8s_openapi::api::admissionregistration::v1::{AuditAnnotation, Variable};

use crate::policy::FinalizerField;
use crate::policy::builtin::{self, BUILTIN_CONTROLLERS};
use crate::policy::config::{FinalizerPattern, Mode, Policy, Rule};

/// The name of the ValidatingAdmissionPolicy and of its binding. The audit
/// annotations it writes are prefixed with it (`finalizer-guard/decision`),
/// apart from the webhook's (`finalizers.finalizer-guard.io/decision`), so
/// both can run at once.
pub const NAME: &str = "finalizer-guard";

/// The longest finalizer list (`metadata.finalizers`, a Namespace's
/// `spec.finalizers`), before or after a write, that the policy judges; a
/// write that changes a longer one is refused. Finding the removed names
/// compares every old name with every new one: kube-apiserver's CEL cost
/// accounting charges a list membership test as one unit, whatever the
/// list's length, so its per-expression limit never stops that. Measured on
/// kube-apiserver 1.34 (README, "Three ways to run the guard"): 8000
/// finalizers took about 28 s of one core, 2000 about 1.5 s. The bound also
/// keeps `estimated_cost` within kube-apiserver's limit for policies of
/// hundreds of rules.
pub const MAX_FINALIZERS: usize = 128;

/// Every character an override's value may hold: letters, marks, numbers,
/// punctuation, symbols and spaces. Its complement is what
/// `overrides::parse` refuses as a control or format character: controls
/// (Cc), format (Cf), private use (Co), surrogates (Cs), the line and
/// paragraph separators (Zl, Zp), and unassigned code points (Cn, here:
/// what belongs to no category in the API server's Unicode tables).
pub const ALLOWED_CHARACTERS: &str = r"^[\p{L}\p{M}\p{N}\p{P}\p{S}\p{Zs}]*$";

/// A visible character, somewhere in DETAIL: a letter, number, punctuation
/// or symbol, but not those drawn as blank space (the Hangul fillers
/// U+115F, U+1160, U+3164, U+FFA0 and the blank Braille pattern U+2800),
/// as in `overrides::is_visible`. RE2 has no class subtraction, so each
/// category minus its blanks is a negated class of its complement.
pub const VISIBLE_CHARACTER: &str =
    r"[\p{N}\p{P}]|[^\P{L}\x{115F}\x{1160}\x{3164}\x{FFA0}]|[^\P{S}\x{2800}]";

/// A change of `metadata.finalizers`, or of a Namespace's `spec.finalizers`
/// through `namespaces/finalize`: the only writes the validations are
/// evaluated for. Cheaper than the webhook's condition (a list comparison,
/// not a set difference): the difference is computed once, in the
/// variables, and everyday writes never get that far.
pub(super) const CHANGES_FINALIZERS: &str = "\
(has(oldObject.metadata) && has(oldObject.metadata.finalizers) &&
  oldObject.metadata.finalizers != null && size(oldObject.metadata.finalizers) > 0 &&
  !(has(object.metadata) && has(object.metadata.finalizers) &&
    object.metadata.finalizers == oldObject.metadata.finalizers))
||
(request.resource.group == '' && request.resource.resource == 'namespaces' &&
  request.subResource == 'finalize' &&
  has(oldObject.spec) && has(oldObject.spec.finalizers) &&
  oldObject.spec.finalizers != null && size(oldObject.spec.finalizers) > 0 &&
  !(has(object.spec) && has(object.spec.finalizers) &&
    object.spec.finalizers == oldObject.spec.finalizers))";

/// `variables.decision` for a removal nothing allows: the webhook's verdict.
pub(super) fn denied_word(mode: Mode) -> &'static str {
    match mode {
        Mode::Enforce => "denied",
        Mode::Warn => "would-deny",
    }
}

fn var(name: &str, expression: impl Into<String>) -> Variable {
    Variable {
        name: name.into(),
        expression: expression.into(),
    }
}

/// The decision, step by step (README, "How a review is decided"): each
/// step's variables may read those of the steps before it.
pub(super) fn variables(policy: &Policy) -> Vec<Variable> {
    let mut all = removed_variables();
    all.extend(builtin_variables(policy));
    all.extend(rule_variables(policy));
    all.extend(override_variables(policy));
    all.push(decision_variable(policy.mode));
    all
}

/// Step 2, which finalizers the write removes, from `metadata.finalizers` and,
/// through `namespaces/finalize`, a Namespace's `spec.finalizers`.
fn removed_variables() -> Vec<Variable> {
    vec![
        var(
            "oldFinalizers",
            "// 2. Removed: names in oldObject's list absent from object's; absent, null and [] are all empty.\n\
             has(oldObject.metadata) && has(oldObject.metadata.finalizers) && oldObject.metadata.finalizers != null ?\n  \
             oldObject.metadata.finalizers : []",
        ),
        var(
            "newFinalizers",
            "has(object.metadata) && has(object.metadata.finalizers) && object.metadata.finalizers != null ?\n  \
             object.metadata.finalizers : []",
        ),
        var(
            "namespaceFinalize",
            "// A Namespace's spec.finalizers, written through namespaces/finalize, is guarded the same way.\n\
             request.resource.group == '' && request.resource.resource == 'namespaces' && request.subResource == 'finalize'",
        ),
        var(
            "oldSpecFinalizers",
            "variables.namespaceFinalize && has(oldObject.spec) && has(oldObject.spec.finalizers) &&\n  \
             oldObject.spec.finalizers != null ? oldObject.spec.finalizers : []",
        ),
        var(
            "newSpecFinalizers",
            "variables.namespaceFinalize && has(object.spec) && has(object.spec.finalizers) &&\n  \
             object.spec.finalizers != null ? object.spec.finalizers : []",
        ),
        var(
            "tooManyFinalizers",
            format!(
                "// Longer lists are refused, not judged: comparing two lists costs kube-apiserver\n\
                 // time that grows with the product of their lengths, and its CEL cost limit does not stop it.\n\
                 size(variables.oldFinalizers) > {max} || size(variables.newFinalizers) > {max} ||\n  \
                 size(variables.oldSpecFinalizers) > {max} || size(variables.newSpecFinalizers) > {max}",
                max = MAX_FINALIZERS
            ),
        ),
        var(
            "removedFinalizers",
            "variables.tooManyFinalizers ? [] :\n  \
             variables.oldFinalizers.filter(f, !(f in variables.newFinalizers))",
        ),
        var(
            "removedSpecFinalizers",
            "variables.tooManyFinalizers ? [] :\n  \
             variables.oldSpecFinalizers.filter(f, !(f in variables.newSpecFinalizers))",
        ),
    ]
}

/// Step 4, Kubernetes' own controllers: the finalizers the requester may remove
/// as one of them.
fn builtin_variables(policy: &Policy) -> Vec<Variable> {
    let (builtin_metadata, builtin_spec) = builtin_tables(policy);
    vec![
        var(
            "builtinTable",
            format!(
                "// 4. Kubernetes' own controllers, by exact username (builtinControllers{}):\n\
                 // the metadata.finalizers each may remove, and which controller it is then.\n{}",
                if policy.builtin_identities.is_empty() {
                    ""
                } else {
                    " and builtinIdentities"
                },
                table_literal(&builtin_metadata)
            ),
        ),
        var(
            "builtinSpecTable",
            format!(
                "// The same for a Namespace's spec.finalizers.\n{}",
                table_literal(&builtin_spec)
            ),
        ),
        var(
            "builtinFinalizers",
            "request.userInfo.username in variables.builtinTable ?\n  \
             variables.builtinTable[request.userInfo.username] : {}",
        ),
        var(
            "builtinSpecFinalizers",
            "request.userInfo.username in variables.builtinSpecTable ?\n  \
             variables.builtinSpecTable[request.userInfo.username] : {}",
        ),
    ]
}

/// Step 4, the rules covering the requester, the object's namespace and its
/// resource, and the removed finalizers that neither they nor the built-in
/// table authorize.
fn rule_variables(policy: &Policy) -> Vec<Variable> {
    vec![
        var(
            "resource",
            "// RESOURCE or RESOURCE.GROUP, as rules name resources.\n\
             request.resource.group == '' ? request.resource.resource :\n  \
             request.resource.resource + '.' + request.resource.group",
        ),
        var(
            "objectNamespace",
            "// '' for a cluster-scoped object; a Namespace is cluster-scoped, whatever request.namespace says.\n\
             variables.resource == 'namespaces' ? '' : request.namespace",
        ),
        var("rules", rules_literal(&policy.rules)),
        var(
            "policyGroups",
            format!(
                "// Every group a rule names, for one lookup per group of the requester.\n{}",
                set_literal(
                    policy
                        .rules
                        .iter()
                        .flat_map(|r| r.groups.iter().map(String::as_str))
                )
            ),
        ),
        var(
            "requesterGroups",
            "// kube-apiserver leaves out an empty groups list.\n\
             has(request.userInfo.groups) ?\n  \
             request.userInfo.groups.filter(g, g in variables.policyGroups) : []",
        ),
        var(
            "requesterRules",
            "// The rules covering this requester, namespace and resource.\n\
             variables.rules.filter(r,\n  \
             ((has(r.users) && request.userInfo.username in r.users) ||\n    \
             (has(r.groups) && r.groups.exists(g, g in variables.requesterGroups))) &&\n  \
             (!has(r.namespaces) || variables.objectNamespace in r.namespaces) &&\n  \
             (!has(r.resources) || variables.resource in r.resources))",
        ),
        var(
            "unauthorizedFinalizers",
            "variables.removedFinalizers.filter(f, !(f in variables.builtinFinalizers ||\n  \
             variables.requesterRules.exists(r, (has(r.finalizers) && f in r.finalizers) ||\n    \
             (has(r.prefixes) && r.prefixes.exists(p, f.startsWith(p))))))",
        ),
        var(
            "unauthorizedSpecFinalizers",
            "variables.removedSpecFinalizers.filter(f, !(f in variables.builtinSpecFinalizers ||\n  \
             variables.requesterRules.exists(r, (has(r.finalizers) && f in r.finalizers) ||\n    \
             (has(r.prefixes) && r.prefixes.exists(p, f.startsWith(p))))))",
        ),
    ]
}

/// Step 5, the override annotation, and why it does not apply ('' when it does).
fn override_variables(policy: &Policy) -> Vec<Variable> {
    let settings = &policy.override_settings;
    let mut all = vec![
        var(
            "overrideValue",
            format!(
                "// 5. The override annotation on the object as it will be stored.\n\
                 has(object.metadata) && has(object.metadata.annotations) && object.metadata.annotations != null &&\n  \
                 {key} in object.metadata.annotations ? object.metadata.annotations[{key}] : null",
                key = lit(&settings.annotation)
            ),
        ),
        var(
            "overrideReason",
            "// REASON: DETAIL, split at the first ':' and trimmed.\n\
             variables.overrideValue != null && variables.overrideValue.indexOf(':') >= 0 ?\n  \
             variables.overrideValue.substring(0, variables.overrideValue.indexOf(':')).trim() : ''",
        ),
        var(
            "overrideDetail",
            "variables.overrideValue != null && variables.overrideValue.indexOf(':') >= 0 ?\n  \
             variables.overrideValue.substring(variables.overrideValue.indexOf(':') + 1).trim() : ''",
        ),
    ];
    if !settings.finalizers.is_empty() {
        all.push(var("overrideEntries", entries_literal(policy)));
        all.push(var(
            "refusedFinalizers",
            "// The removed finalizers nothing authorizes whose entry the override's reason does not release.\n\
             (variables.unauthorizedFinalizers + variables.unauthorizedSpecFinalizers).filter(f,\n  \
             variables.overrideEntries.exists(e, ((has(e.finalizers) && f in e.finalizers) ||\n    \
             (has(e.prefixes) && e.prefixes.exists(p, f.startsWith(p)))) &&\n    \
             !(variables.overrideReason in e.reasons)))",
        ));
    }
    all.push(var("overrideProblem", override_problem(policy)));
    all
}

/// `variables.overrideProblem`: why the override does not apply, or ''
/// when it does, checked in the webhook's order.
fn override_problem(policy: &Policy) -> String {
    let settings = &policy.override_settings;
    let deletion = if settings.require_deletion {
        "\n// override.requireDeletion: an override releases only an object being deleted.\n\
         !(has(oldObject.metadata) && has(oldObject.metadata.deletionTimestamp) &&\n  \
         oldObject.metadata.deletionTimestamp != null) ?\n  \
         'the object is not being deleted: an override only releases an object stuck in Terminating (delete it first)' :"
    } else {
        ""
    };
    // override.finalizers: checked after the value, before requireDeletion, as the webhook does.
    let refused = if settings.finalizers.is_empty() {
        ""
    } else {
        "\nsize(variables.refusedFinalizers) > 0 ?\n  \
         variables.refusedFinalizers.map(f, strings.quote(f) +\n    \
         variables.overrideEntries.filter(e, (has(e.finalizers) && f in e.finalizers) ||\n      \
         (has(e.prefixes) && e.prefixes.exists(p, f.startsWith(p)))).map(e, string(e.refusal)).join('')).join('; ') :"
    };
    if settings.approval.is_some() {
        // The two-person override: no approval can be verified here, so no
        // override is taken. Never an allow the webhook would deny.
        format!(
            "// Why the override does not apply: under override.approval every override needs an approval,\n\
             // which only the webhook can verify (its seal and clock); this policy takes none.\n\
             variables.overrideValue == null ? 'absent' :\n  \
             {}",
            lit(APPROVAL_NOT_HERE)
        )
    } else {
        format!(
            "// Why the override does not apply, or '' when it does (the webhook's checks, in its order).\n\
             variables.overrideValue == null ? 'absent' :\n\
             !variables.overrideValue.matches({allowed}) ?\n  \
             'it holds a control or format character: write \"REASON: DETAIL\" as plain text on one line' :\n\
             variables.overrideReason == '' ? 'it must read \"REASON: DETAIL\"' :\n\
             !(variables.overrideReason in {reasons}) ?\n  \
             'reason ' + strings.quote(variables.overrideReason) + ' is not an approved reason' :\n\
             !variables.overrideDetail.matches({visible}) ?\n  \
             'DETAIL is empty or has no visible character: say what happened, e.g. an incident id and the node' :\
             {refused}{deletion}\n\
             ''",
            allowed = lit(ALLOWED_CHARACTERS),
            reasons = list_literal(settings.reasons.iter().map(String::as_str)),
            visible = lit(VISIBLE_CHARACTER),
        )
    }
}

/// Why no override is taken under `override.approval`.
pub(super) const APPROVAL_NOT_HERE: &str = "an override needs the two-person approval (override.approval), which only the webhook verifies: this ValidatingAdmissionPolicy takes none";

/// `override.finalizers` as data: per entry, its exact names and prefixes,
/// the reasons that release them (none for `never`), and the refusal's words.
fn entries_literal(policy: &Policy) -> String {
    let settings = &policy.override_settings;
    let mut s = String::from(
        "// override.finalizers, one entry a line: the finalizers (exact names and prefixes) and the\n\
         // reasons that release them (none: no override does, only its rule or controller).\n[",
    );
    for (i, entry) in settings.finalizers.iter().enumerate() {
        s.push_str(if i == 0 { "\n  {" } else { ",\n  {" });
        let (mut exact, mut prefixes) = (Vec::new(), Vec::new());
        for pattern in &entry.finalizers {
            match pattern {
                FinalizerPattern::Exact(n) => exact.push(n.as_str()),
                FinalizerPattern::Prefix(n) => prefixes.push(n.as_str()),
            }
        }
        let accepts = match entry {
            e if e.never => Vec::new(),
            e => e
                .reasons
                .as_deref()
                .unwrap_or(&settings.reasons)
                .iter()
                .map(String::as_str)
                .collect(),
        };
        let refusal = if accepts.is_empty() {
            format!(
                ": no override releases it, only its rule or controller ({})",
                entry.label
            )
        } else {
            format!(" accepts only {} ({})", accepts.join(", "), entry.label)
        };
        let _ = write!(
            s,
            "'reasons': dyn({}), 'refusal': dyn({})",
            list_literal(accepts),
            lit(&refusal)
        );
        if !exact.is_empty() {
            let _ = write!(s, ", 'finalizers': dyn({})", list_literal(exact));
        }
        if !prefixes.is_empty() {
            let _ = write!(s, ", 'prefixes': dyn({})", list_literal(prefixes));
        }
        s.push('}');
    }
    s.push_str("\n]");
    s
}

/// Steps 3 to 6: '' when nothing is removed, else the webhook's verdict.
fn decision_variable(mode: Mode) -> Variable {
    let denied = denied_word(mode);
    var(
        "decision",
        format!(
            "// 3., 4., 5. and 6.: '' when nothing is removed.\n\
             variables.tooManyFinalizers ? {denied} :\n\
             size(variables.removedFinalizers) + size(variables.removedSpecFinalizers) == 0 ? '' :\n\
             size(variables.unauthorizedFinalizers) + size(variables.unauthorizedSpecFinalizers) == 0 ? 'authorized' :\n\
             variables.overrideProblem == '' ? 'override' : {denied}",
            denied = lit(denied)
        ),
    )
}

/// The denial, naming what the webhook's names: the finalizers, the
/// object, the requester, and how to override.
pub(super) fn message_expression(policy: &Policy) -> String {
    let settings = &policy.override_settings;
    format!(
        "variables.tooManyFinalizers ?\n  \
         'finalizer-guard refused changing the finalizers of ' + variables.resource + ' ' + strings.quote(request.name) +\n  \
         (variables.objectNamespace == '' ? '' : ' in namespace ' + strings.quote(variables.objectNamespace)) +\n  \
         {too_many} :\n\
         'finalizer-guard denied removing ' +\n\
         (size(variables.unauthorizedFinalizers) == 0 ? '' :\n  \
         (size(variables.unauthorizedFinalizers) == 1 ? 'finalizer ' : 'finalizers ') +\n  \
         variables.unauthorizedFinalizers.map(f, strings.quote(f)).join(', ')) +\n\
         (size(variables.unauthorizedFinalizers) > 0 && size(variables.unauthorizedSpecFinalizers) > 0 ? ' and ' : '') +\n\
         (size(variables.unauthorizedSpecFinalizers) == 0 ? '' :\n  \
         'spec.finalizers ' + variables.unauthorizedSpecFinalizers.map(f, strings.quote(f)).join(', ')) +\n\
         ' from ' + variables.resource + ' ' + strings.quote(request.name) +\n\
         (variables.objectNamespace == '' ? '' : ' in namespace ' + strings.quote(variables.objectNamespace)) +\n\
         ': requester ' +\n\
         (request.userInfo.username.matches({allowed}) ? strings.quote(request.userInfo.username) :\n  \
         'whose name holds control or format characters') +\n\
         ' is not authorized to remove ' +\n\
         (size(variables.unauthorizedFinalizers) + size(variables.unauthorizedSpecFinalizers) == 1 ? 'it' : 'them') +\n\
         ' by any rule or built-in controller.' +\n\
         (variables.overrideProblem == 'absent' ? '' :\n  \
         ' The override annotation ' + {key} + ' is not valid: ' + variables.overrideProblem + '.') +\n\
         {how}",
        allowed = lit(ALLOWED_CHARACTERS),
        key = lit(&settings.annotation),
        too_many = lit(&format!(
            ": it holds more than {MAX_FINALIZERS} finalizers, more than this ValidatingAdmissionPolicy judges; \
             to change them, take its binding {NAME} out for the time it takes (kube-apiserver's audit log records that)"
        )),
        how = lit(&how_to_override(policy)),
    )
}

/// The end of a denial: how to override, as far as this policy takes one.
pub(super) fn how_to_override(policy: &Policy) -> String {
    let settings = &policy.override_settings;
    if settings.approval.is_some() {
        return format!(
            " An override needs the two-person approval, which only the webhook verifies: this ValidatingAdmissionPolicy takes none \
             (an approver annotates the object with {} and {}; see the webhook's denial).",
            settings.annotation,
            crate::policy::approval::APPROVED_BY
        );
    }
    format!(
        " To override in an emergency, annotate the object with {}: \"REASON: DETAIL\", REASON one of: {}{}.",
        settings.annotation,
        settings.reasons.join(", "),
        if settings.finalizers.is_empty() {
            ""
        } else {
            " (override.finalizers narrows them for some finalizers)"
        }
    )
}

/// The webhook's audit annotations, as far as CEL computes them.
pub(super) fn audit_annotations(policy: &Policy) -> Vec<AuditAnnotation> {
    let denied = denied_word(policy.mode);
    let controllers = list_literal(BUILTIN_CONTROLLERS.iter().map(|c| c.name));
    let annotation = |key: &str, value: String| AuditAnnotation {
        key: key.into(),
        value_expression: value,
    };
    let covers = "(has(r.finalizers) && f in r.finalizers) ||\n    (has(r.prefixes) && r.prefixes.exists(p, f.startsWith(p)))";
    vec![
        annotation("decision", "variables.decision".into()),
        annotation(
            "too-many-finalizers",
            format!("variables.tooManyFinalizers ? \"more than {MAX_FINALIZERS}\" : \"\""),
        ),
        annotation(
            "removed-finalizers",
            "variables.removedFinalizers.join(',')".into(),
        ),
        annotation(
            "removed-spec-finalizers",
            "variables.removedSpecFinalizers.join(',')".into(),
        ),
        annotation(
            "unauthorized-finalizers",
            "variables.unauthorizedFinalizers.join(',')".into(),
        ),
        annotation(
            "unauthorized-spec-finalizers",
            "variables.unauthorizedSpecFinalizers.join(',')".into(),
        ),
        annotation(
            "authorized-by",
            format!(
                "({controllers}.filter(c,\n  \
                 variables.removedFinalizers.exists(f, f in variables.builtinFinalizers && variables.builtinFinalizers[f] == c) ||\n  \
                 variables.removedSpecFinalizers.exists(f, f in variables.builtinSpecFinalizers && variables.builtinSpecFinalizers[f] == c)\n\
                 ).map(c, 'built-in controller ' + c) +\n\
                 variables.requesterRules.filter(r,\n  \
                 variables.removedFinalizers.exists(f, !(f in variables.builtinFinalizers) && ({covers})) ||\n  \
                 variables.removedSpecFinalizers.exists(f, !(f in variables.builtinSpecFinalizers) && ({covers}))\n\
                 ).map(r, 'rule ' + r.name)).join(', ')"
            ),
        ),
        annotation(
            "override-reason",
            "variables.decision == \"override\" ? variables.overrideReason : \"\"".into(),
        ),
        annotation(
            "override-detail",
            "variables.decision == \"override\" ? variables.overrideDetail : \"\"".into(),
        ),
        annotation(
            "override-problem",
            format!(
                "variables.decision == {} && variables.overrideProblem != \"absent\" ? variables.overrideProblem : \"\"",
                dq(denied)
            ),
        ),
        annotation(
            "mode",
            format!(
                "variables.decision == {} ? {} : \"\"",
                dq(denied),
                dq(policy.mode.as_str())
            ),
        ),
    ]
}

/// For each username the table and `builtinIdentities` know, the finalizers
/// it may remove as a built-in controller, and that controller's name:
/// what [`Policy::builtin_owner`] answers, asked for every pair.
type Table = BTreeMap<String, BTreeMap<&'static str, &'static str>>;

fn builtin_tables(policy: &Policy) -> (Table, Table) {
    let (mut metadata, mut spec) = (Table::new(), Table::new());
    if !policy.builtin_controllers {
        return (metadata, spec);
    }
    let mut usernames: Vec<&str> = builtin::all_usernames();
    for identity in &policy.builtin_identities {
        for user in &identity.users {
            if !usernames.contains(&user.as_str()) {
                usernames.push(user);
            }
        }
    }
    for username in usernames {
        for controller in BUILTIN_CONTROLLERS {
            for finalizer in controller.finalizers {
                if let Some(owner) = policy.builtin_owner(username, finalizer, controller.field) {
                    let table = match controller.field {
                        FinalizerField::Metadata => &mut metadata,
                        FinalizerField::Spec => &mut spec,
                    };
                    table
                        .entry(username.to_string())
                        .or_default()
                        .insert(finalizer, owner.name);
                }
            }
        }
    }
    (metadata, spec)
}

fn table_literal(table: &Table) -> String {
    if table.is_empty() {
        return "{}".into();
    }
    let mut s = String::from("{");
    for (i, (user, finalizers)) in table.iter().enumerate() {
        s.push_str(if i == 0 { "\n  " } else { ",\n  " });
        let _ = write!(s, "{}: {{", lit(user));
        for (j, (finalizer, controller)) in finalizers.iter().enumerate() {
            if j > 0 {
                s.push_str(", ");
            }
            let _ = write!(s, "{}: {}", lit(finalizer), lit(controller));
        }
        s.push('}');
    }
    s.push_str("\n}");
    s
}

/// The rules as data: a list of maps, one per rule, in the policy's order.
/// `dyn()` keeps the map's values of one type, as kube-apiserver's
/// homogeneous-literal check wants. `namespaces` and `resources` are there
/// only when the rule is scoped.
fn rules_literal(rules: &[Rule]) -> String {
    let mut s = String::from(
        "// 4. The rules, one a line: users (service accounts as their usernames), groups, exact\n\
         // finalizer names and prefixes (patterns ending in *), and the namespaces and resources\n\
         // a rule is scoped to. A field is left out when empty.\n[",
    );
    for (i, rule) in rules.iter().enumerate() {
        s.push_str(if i == 0 { "\n  {" } else { ",\n  {" });
        let _ = write!(s, "'name': dyn({})", lit(&rule.label));
        let mut field = |key: &str, names: Vec<&str>| {
            if !names.is_empty() {
                let _ = write!(s, ", '{key}': dyn({})", list_literal(names));
            }
        };
        let users: Vec<&str> = rule
            .users
            .iter()
            .chain(&rule.service_accounts)
            .map(String::as_str)
            .collect();
        field("users", users);
        field("groups", rule.groups.iter().map(String::as_str).collect());
        let (mut exact, mut prefixes) = (Vec::new(), Vec::new());
        for pattern in &rule.finalizers {
            match pattern {
                FinalizerPattern::Exact(n) => exact.push(n.as_str()),
                FinalizerPattern::Prefix(n) => prefixes.push(n.as_str()),
            }
        }
        field("finalizers", exact);
        field("prefixes", prefixes);
        // Scoped to nothing is not the same as not scoped: an empty list stays.
        if let Some(namespaces) = &rule.namespaces {
            let _ = write!(
                s,
                ", 'namespaces': dyn({})",
                list_literal(namespaces.iter().map(String::as_str))
            );
        }
        if let Some(resources) = &rule.resources {
            let names: Vec<String> = resources.iter().map(ToString::to_string).collect();
            let _ = write!(
                s,
                ", 'resources': dyn({})",
                list_literal(names.iter().map(String::as_str))
            );
        }
        s.push('}');
    }
    s.push_str(if rules.is_empty() { "]" } else { "\n]" });
    s
}

/// `{'a': true, 'b': true}`: a map, so that a membership test costs one
/// lookup however many names it holds.
fn set_literal<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let names: std::collections::BTreeSet<&str> = items.into_iter().collect();
    let mut s = String::from("{");
    for (i, name) in names.into_iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        let _ = write!(s, "{}: true", lit(name));
    }
    s.push('}');
    s
}

fn list_literal<'a>(items: impl IntoIterator<Item = &'a str>) -> String {
    let mut s = String::from("[");
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&lit(item));
    }
    s.push(']');
    s
}

/// A word of our own (never the policy's) as a double-quoted CEL string: on
/// one line, YAML then need not double the single quotes.
fn dq(word: &'static str) -> String {
    debug_assert!(word.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    format!("\"{word}\"")
}

/// `s` as a single-quoted CEL string literal of printable ASCII: a quote,
/// a backslash and every other character escaped, so a name from the policy
/// can neither end the literal nor hide in the YAML.
pub fn lit(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            ' '..='~' => out.push(c),
            c if u32::from(c) <= 0xFFFF => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => {
                let _ = write!(out, "\\U{:08x}", u32::from(c));
            }
        }
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_printable_ascii_and_escape_quotes() {
        assert_eq!(lit("a'b\\c"), r"'a\'b\\c'");
        assert_eq!(lit("d\u{e9}v\n\u{202e}"), r"'d\u00e9v\u000a\u202e'");
        assert_eq!(lit("\u{1F525}"), r"'\U0001f525'");
        for c in lit("x\u{0}\u{7f}\u{2028}\u{feff}'\"").chars() {
            assert!(c.is_ascii_graphic() || c == ' ', "{c:?}");
        }
    }
}
