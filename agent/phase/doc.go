// Package phase names the phase (draft, verify, accept, draft-extend …) of
// each CUDA call of a Python inference server from the Python frames on the
// stack at the call.
//
// A [Preset] is an ordered list of rules, each a phase and conditions on one
// frame: a co_qualname regex, a co_name regex, a co_filename regex and a
// co_firstlineno. Presets for SGLang, vLLM and Hugging Face transformers are
// embedded ([Presets], [LoadPreset]); users write their own YAML rules
// ([LoadRulesFile]), optionally in front of a preset's. [Preset.Compile]
// gives a [Matcher] for one Python version.
//
// # Matching
//
// Frames are walked from the innermost outwards; the first frame that some
// rule matches gives the phase ("innermost wins", so the accept step inside
// verify comes out as accept), rules being tried in order within a frame.
// A stack no rule matches is "other", phase id 0; the preset's phases get
// ids 1..n in display order.
//
// A rule with requires_below applies only if a frame strictly below the
// matched one (the innermost frame included) matches that qualname regex,
// a "marker". Hugging Face's _assisted_decoding is spec.verify when a
// Module._call_impl frame is below it (the target forward) and
// spec.cycle_other otherwise. So that [Matcher.Classify] can be cached per
// code object, a preset uses one requires_below pattern, and every
// requires_below rule is followed by a fallback rule with the same frame
// conditions and no requires_below.
//
// Python 3.10 has no co_qualname (the symbolizer's Qualname equals Name).
// A Matcher compiled for 3.10 ignores Qualname: it uses py310_rules when
// the preset has them, and a rule's qualname regex is replaced by its name
// regex when given, else by a co_name regex derived from the qualname
// regex's last dotted component (`^EAGLEWorker\.verify$` gives `verify`).
// The derived rule no longer sees the class, so presets carry explicit
// (co_name, file) rules: `verify` in eagle_worker.py is spec.verify, in
// eagle_info.py spec.accept.
//
// # Rules file
//
//	name: my-rules                  # default: the file's base name
//	description: one line
//	checked_against:                # optional; inherited when extending
//	  distribution: sglang          # the installed distribution (its *.dist-info)
//	  versions: ['0.4..0.5', '0.5.6']   # releases and inclusive ranges (CheckedAgainst)
//	extends: sglang-eagle           # optional: these rules go in front of the preset's
//	process:                        # optional; inherited when extending
//	  cmdline: '^sglang::scheduler' # regex on the command line
//	  main_thread: true             # phases run on TID == PID only
//	file_regex: 'sglang/srt/'       # default file regex of this file's rules and cycle
//	phases: [spec.draft, …]         # display order; default: the extended preset's,
//	                                # then new phases in order of first use; "other" last
//	cycle:                          # optional; inherited when extending
//	  qualname: '^EAGLEWorker\.forward_batch_generation$'
//	  start_phase: spec.draft       # the phase that begins a cycle
//	  py310: {name: '^forward_batch_generation$', file: 'eagle_worker\.py$'}
//	rules:                          # tried in order on every frame
//	  - phase: spec.verify
//	    qualname: '^EAGLEWorker\.verify$'   # co_qualname regex (3.11+)
//	    name: '^verify$'                    # co_name regex
//	    file: 'speculative/'                # co_filename regex; default file_regex
//	    first_line: 120                     # co_firstlineno
//	    requires_below: '^Module\._call_impl$'  # needs a fallback rule after it
//	py310_rules: […]                # optional: replace rules on Python 3.10
//
// Unknown fields are errors. A rules file that extends a preset but has no
// py310_rules uses its rules, converted as above, in front of the preset's
// py310_rules on Python 3.10.
//
// A rules file holds one YAML document. So that no file can take the
// host's memory or CPU, its size, nesting, alias expansion, list lengths
// and regular expressions are bounded ([MaxRulesFileBytes] and the other
// limits), each far above what a real file needs; a file past one gets an
// error naming the limit and what to change.
package phase
