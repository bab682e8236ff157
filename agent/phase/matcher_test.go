package phase

import (
	"strings"
	"testing"
)

// frameAt returns a constructor of frames under a site-packages prefix;
// Name is the qualname's last component, as CPython sets co_name.
func frameAt(prefix string) func(qual, file string) Frame {
	return func(qual, file string) Frame {
		name := qual[strings.LastIndexByte(qual, '.')+1:]
		return Frame{Qualname: qual, Name: name, Filename: prefix + file, FirstLine: 10}
	}
}

var (
	sg    = frameAt("/usr/local/lib/python3.10/dist-packages/sglang/srt/")
	vl    = frameAt("/usr/local/lib/python3.12/dist-packages/vllm/")
	hf    = frameAt("/opt/venv/lib/python3.12/site-packages/transformers/")
	torch = frameAt("/usr/local/lib/python3.10/dist-packages/torch/")
	user  = frameAt("/srv/app/")
)

// as310 returns the stack as a Python 3.10 symbolizer sees it.
func as310(frames []Frame) []Frame {
	out := make([]Frame, len(frames))
	for i, f := range frames {
		f.Qualname = f.Name
		out[i] = f
	}
	return out
}

type want struct {
	phase        string
	frame, cycle int
}

type stackCase struct {
	name    string
	stack   []Frame // innermost first
	want    want
	want310 *want // nil: same as want
}

// Frames shared by several SGLang stacks.
var (
	sgGraphReplay  = torch("CUDAGraph.replay", "cuda/graphs.py")
	sgNoGrad       = torch("_NoParamDecoratorContextManager.__call__.<locals>.decorate_context", "utils/_contextlib.py")
	sgRunBatch     = sg("Scheduler.run_batch", "managers/scheduler.py")
	sgLoopNormal   = sg("Scheduler.event_loop_normal", "managers/scheduler.py")
	sgLoopOverlap  = sg("Scheduler.event_loop_overlap", "managers/scheduler.py")
	sgRunScheduler = sg("run_scheduler_process", "managers/scheduler.py")
	sgTpFwd        = sg("TpModelWorker.forward_batch_generation", "managers/tp_worker.py")
	sgMRForward    = sg("ModelRunner.forward", "model_executor/model_runner.py")
	sgMRRaw        = sg("ModelRunner._forward_raw", "model_executor/model_runner.py")
	sgCGReplay     = sg("CudaGraphRunner.replay", "model_executor/cuda_graph_runner.py")
	sgV1Cycle      = sg("EAGLEWorker.forward_batch_generation", "speculative/eagle_worker.py")
	sgV2Cycle      = sg("EAGLEWorkerV2.forward_batch_generation", "speculative/eagle_worker_v2.py")
	sgMLV2Cycle    = sg("MultiLayerEagleWorkerV2.forward_batch_generation", "speculative/multi_layer_eagle_worker_v2.py")
	sgOuterV1      = []Frame{sgRunBatch, sgNoGrad, sgLoopNormal, sgRunScheduler}
	sgOuterV2      = []Frame{sgRunBatch, sgNoGrad, sgLoopOverlap, sgRunScheduler}
)

func cat(parts ...[]Frame) []Frame {
	var out []Frame
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func st(f ...Frame) []Frame { return f }

var sglangCases = []stackCase{
	{"v1 verify target forward (graph replay)",
		cat(st(sgGraphReplay, sgCGReplay, sgMRRaw, sgMRForward, sgTpFwd,
			sg("EAGLEWorker.verify", "speculative/eagle_worker.py"), sgV1Cycle), sgOuterV1),
		want{"spec.verify", 5, 6}, nil},
	{"v1 accept inside verify",
		cat(st(frameAt("/usr/local/lib/python3.10/dist-packages/")("verify_tree_greedy", "sgl_kernel/speculative.py"),
			sg("EagleVerifyInput.verify", "speculative/eagle_info.py"),
			sg("EAGLEWorker.verify", "speculative/eagle_worker.py"), sgV1Cycle), sgOuterV1),
		want{"spec.accept", 1, 3}, nil},
	{"v1 accept, pre-mid-2025 eagle_utils.py",
		cat(st(sg("EagleVerifyInput.verify", "speculative/eagle_utils.py"),
			sg("EAGLEWorker.verify", "speculative/eagle_worker.py"), sgV1Cycle), sgOuterV1),
		want{"spec.accept", 0, 2}, nil},
	{"v1 draft graph replay",
		cat(st(sgGraphReplay, sg("EAGLEDraftCudaGraphRunner._replay", "speculative/eagle_draft_cuda_graph_runner.py"),
			sg("EAGLEDraftCudaGraphRunner.replay", "speculative/eagle_draft_cuda_graph_runner.py"),
			sg("EAGLEWorker.draft", "speculative/eagle_worker.py"), sgV1Cycle), sgOuterV1),
		want{"spec.draft", 2, 4}, nil},
	{"v1 draft preprocess sync",
		cat(st(sg("EAGLEWorker._draft_preprocess_decode", "speculative/eagle_worker.py"),
			sg("EAGLEWorker.draft", "speculative/eagle_worker.py"), sgV1Cycle), sgOuterV1),
		want{"spec.draft", 0, 2}, nil},
	{"v1 eager draft forward",
		cat(st(sgMRForward, sg("EAGLEWorker.draft_forward", "speculative/eagle_worker.py"),
			sg("EAGLEWorker.draft", "speculative/eagle_worker.py"), sgV1Cycle), sgOuterV1),
		want{"spec.draft", 1, 3}, nil},
	{"v1 build tree",
		cat(st(sg("build_tree_kernel_efficient", "speculative/eagle_utils.py"),
			sg("EAGLEWorker.draft", "speculative/eagle_worker.py"), sgV1Cycle), sgOuterV1),
		want{"spec.draft", 0, 2}, nil},
	{"v1 draft extend graph replay",
		cat(st(sgGraphReplay, sg("EAGLEDraftExtendCudaGraphRunner.replay", "speculative/eagle_draft_extend_cuda_graph_runner.py"),
			sg("EAGLEWorker.forward_draft_extend_after_decode", "speculative/eagle_worker.py"), sgV1Cycle), sgOuterV1),
		want{"spec.draft_extend", 1, 3}, nil},
	// capture_for_decode has no rule of its own: forward_draft_extend (prefill) calls it too.
	{"v1 draft extend capture_for_decode",
		cat(st(sg("EAGLEWorker.capture_for_decode", "speculative/eagle_worker.py"),
			sg("EAGLEWorker.forward_draft_extend_after_decode", "speculative/eagle_worker.py"), sgV1Cycle), sgOuterV1),
		want{"spec.draft_extend", 1, 2}, nil},
	{"v1 prefill capture_for_decode",
		cat(st(sg("EAGLEWorker.capture_for_decode", "speculative/eagle_worker.py"),
			sg("EAGLEWorker.forward_draft_extend", "speculative/eagle_worker.py"), sgV1Cycle), sgOuterV1),
		want{"spec.prefill", 1, 2}, nil},
	{"v1 prefill target forward",
		cat(st(sgMRForward, sgTpFwd, sg("EAGLEWorker.forward_target_extend", "speculative/eagle_worker.py"), sgV1Cycle), sgOuterV1),
		want{"spec.prefill", 2, 3}, nil},
	{"v1 prefill draft forward",
		cat(st(sgMRForward, sg("EAGLEWorker.forward_draft_extend", "speculative/eagle_worker.py"), sgV1Cycle), sgOuterV1),
		want{"spec.prefill", 1, 2}, nil},
	{"v1 cycle body",
		cat(st(sgV1Cycle), sgOuterV1),
		want{"spec.cycle_other", 0, 0}, nil},
	{"v2 verify target forward",
		cat(st(sgGraphReplay, sgCGReplay, sgMRRaw, sgMRForward, sgTpFwd,
			sg("EAGLEWorkerV2.verify", "speculative/eagle_worker_v2.py"), sgV2Cycle), sgOuterV2),
		want{"spec.verify", 5, 6}, nil},
	{"v2 prepare_for_v2_verify",
		cat(st(sg("EagleVerifyInputV2Mixin.prepare_for_v2_verify", "speculative/eagle_info_v2.py"),
			sg("EAGLEWorkerV2.verify", "speculative/eagle_worker_v2.py"), sgV2Cycle), sgOuterV2),
		want{"spec.verify", 0, 2}, nil},
	{"v2 accept (sample)",
		cat(st(sg("EagleVerifyInput.sample", "speculative/eagle_info.py"),
			sg("EAGLEWorkerV2.verify", "speculative/eagle_worker_v2.py"), sgV2Cycle), sgOuterV2),
		want{"spec.accept", 0, 2}, nil},
	{"main accept (eagle_sample in run_eagle_verify)",
		cat(st(sg("eagle_sample", "speculative/eagle_utils.py"),
			sg("run_eagle_verify", "speculative/eagle_worker_common.py"),
			sg("EAGLEWorkerV2.verify", "speculative/eagle_worker_v2.py"), sgV2Cycle), sgOuterV2),
		want{"spec.accept", 0, 3}, nil},
	{"main verify target forward (run_eagle_verify)",
		cat(st(sgMRForward, sgTpFwd, sg("run_eagle_verify", "speculative/eagle_worker_common.py"),
			sg("EAGLEWorkerV2.verify", "speculative/eagle_worker_v2.py"), sgV2Cycle), sgOuterV2),
		want{"spec.verify", 3, 4}, nil},
	{"v2 draft",
		cat(st(sg("EagleDraftInputV2Mixin.prepare_for_v2_draft", "speculative/eagle_info_v2.py"),
			sg("EagleDraftWorker.draft", "speculative/eagle_worker_v2.py"), sgV2Cycle), sgOuterV2),
		want{"spec.draft", 0, 2}, nil},
	{"v2 draft graph replay",
		cat(st(sgGraphReplay, sg("EAGLEDraftCudaGraphRunner.replay", "speculative/eagle_draft_cuda_graph_runner.py"),
			sg("EagleDraftWorker.draft", "speculative/eagle_worker_v2.py"), sgV2Cycle), sgOuterV2),
		want{"spec.draft", 1, 3}, nil},
	{"v2 draft extend",
		cat(st(sgMRForward, sg("EagleDraftWorker._draft_extend_for_decode", "speculative/eagle_worker_v2.py"), sgV2Cycle), sgOuterV2),
		want{"spec.draft_extend", 1, 2}, nil},
	{"v2 target prefill straight from forward_batch_generation",
		cat(st(sg("ModelRunner.forward_extend", "model_executor/model_runner.py"), sgMRRaw, sgMRForward, sgTpFwd, sgV2Cycle), sgOuterV2),
		want{"spec.prefill", 4, 4}, nil},
	{"v2 draft prefill",
		cat(st(sgMRForward, sg("EagleDraftWorker._draft_extend_for_prefill", "speculative/eagle_worker_v2.py"), sgV2Cycle), sgOuterV2),
		want{"spec.prefill", 1, 2}, nil},
	{"v2 cycle body",
		cat(st(sgV2Cycle), sgOuterV2),
		want{"spec.cycle_other", 0, 0}, nil},
	{"v2 result processing (next iteration's sync)",
		st(sg("BatchResultProcessor.process_batch_result_decode", "managers/scheduler_components/batch_result_processor.py"),
			sg("Scheduler.process_batch_result", "managers/scheduler.py"), sgLoopOverlap, sgRunScheduler),
		want{"sched.result", 0, -1}, nil},
	{"decode stats log",
		st(sg("SchedulerMetricsMixin.log_decode_stats", "managers/scheduler_metrics_mixin.py"),
			sg("SchedulerOutputProcessorMixin.process_batch_result_decode", "managers/scheduler_output_processor_mixin.py"),
			sgLoopNormal, sgRunScheduler),
		want{"sched.metrics", 0, -1}, nil},
	{"batch building",
		st(sg("ScheduleBatch.prepare_for_decode", "managers/schedule_batch.py"),
			sg("Scheduler.update_running_batch", "managers/scheduler.py"),
			sg("Scheduler.get_next_batch_to_run", "managers/scheduler.py"), sgLoopNormal, sgRunScheduler),
		want{"sched.batch", 0, -1}, nil},
	{"receive requests",
		st(sg("Scheduler.recv_requests", "managers/scheduler.py"), sgLoopNormal, sgRunScheduler),
		want{"sched.recv", 0, -1}, nil},
	{"receive requests (main: SchedulerRequestReceiver)",
		st(sg("SchedulerRequestReceiver.recv_requests", "managers/scheduler_components/request_receiver.py"),
			sgLoopOverlap, sgRunScheduler),
		want{"sched.recv", 0, -1}, nil},
	{"run_batch outside the worker",
		cat(st(sgTpFwd), sgOuterV1),
		want{"sched.run_other", 1, -1}, nil},
	{"event loop",
		st(sgLoopNormal, sgRunScheduler),
		want{"sched.loop", 0, -1}, nil},
	{"disaggregation event loop (mixin)",
		st(sg("SchedulerDisaggregationDecodeMixin.event_loop_normal_disagg_decode", "disaggregation/decode.py"), sgRunScheduler),
		want{"sched.loop", 0, -1}, nil},
	{"multi-layer draft",
		st(sg("MultiLayerEagleWorker.draft", "speculative/multi_layer_eagle_worker.py"),
			sg("MultiLayerEagleWorker.forward_batch_generation", "speculative/multi_layer_eagle_worker.py"), sgRunBatch),
		want{"spec.draft", 0, 1}, nil},
	{"multi-layer draft extend graph replay",
		st(sgGraphReplay, sg("MultiLayerEagleDraftExtendCudaGraphRunner.replay", "speculative/multi_layer_eagle_draft_extend_cuda_graph_runner.py"),
			sg("MultiLayerEagleWorker.forward_draft_extend_after_decode", "speculative/multi_layer_eagle_worker.py"),
			sg("MultiLayerEagleWorker.forward_batch_generation", "speculative/multi_layer_eagle_worker.py"), sgRunBatch),
		want{"spec.draft_extend", 1, 3}, nil},
	{"multi-layer v2 verify",
		st(sgTpFwd, sg("MultiLayerEagleWorkerV2.verify", "speculative/multi_layer_eagle_worker_v2.py"),
			sg("MultiLayerEagleWorkerV2.forward_batch_generation", "speculative/multi_layer_eagle_worker_v2.py"), sgRunBatch),
		want{"spec.verify", 1, 2}, nil},
	{"standalone v2 verify",
		st(sgTpFwd, sg("StandaloneWorkerV2.verify", "speculative/standalone_worker_v2.py"),
			sg("StandaloneWorkerV2.forward_batch_generation", "speculative/standalone_worker_v2.py"), sgRunBatch),
		want{"spec.verify", 1, 2}, nil},
	// Multi-layer EAGLE on main (multi_layer_eagle_worker_v2.py @003c5589).
	{"multi-layer v2 draft (prepare_for_draft)",
		cat(st(sg("prepare_for_draft", "speculative/eagle_worker_common.py"),
			sg("MultiLayerEagleDraftWorker.draft", "speculative/multi_layer_eagle_worker_v2.py"), sgMLV2Cycle), sgOuterV2),
		want{"spec.draft", 1, 2}, nil},
	{"multi-layer v2 draft_forward (_draft_forward_organize)",
		cat(st(sg("select_top_k_tokens", "speculative/spec_utils.py"),
			sg("MultiLayerEagleDraftWorker._draft_forward_organize", "speculative/multi_layer_eagle_worker_v2.py"),
			sg("MultiLayerEagleDraftWorker.draft_forward", "speculative/multi_layer_eagle_worker_v2.py"),
			sg("MultiLayerEagleDraftWorker.draft", "speculative/multi_layer_eagle_worker_v2.py"), sgMLV2Cycle), sgOuterV2),
		want{"spec.draft", 2, 4}, nil},
	{"multi-layer v2 draft extend, per-step graph replay",
		cat(st(sgGraphReplay, sg("FullCudaGraphBackend.replay", "model_executor/runner_backend/full.py"),
			sg("MultiLayerEagleDraftExtendCudaGraphRunner._replay_graph", "speculative/multi_layer_eagle_draft_extend_cuda_graph_runner.py"),
			sg("MultiLayerEagleDraftExtendCudaGraphRunner.replay", "speculative/multi_layer_eagle_draft_extend_cuda_graph_runner.py"),
			sg("MultiLayerEagleMultiStepDraftExtendCudaGraphRunner.replay", "speculative/multi_layer_eagle_draft_extend_cuda_graph_runner.py"),
			sg("MultiLayerEagleDraftWorker._draft_extend_for_decode", "speculative/multi_layer_eagle_worker_v2.py"), sgMLV2Cycle), sgOuterV2),
		want{"spec.draft_extend", 3, 6}, nil},
	{"multi-layer v2 draft extend, single-graph replay",
		cat(st(sgGraphReplay, sg("FullCudaGraphBackend.replay", "model_executor/runner_backend/full.py"),
			sg("OneGraphMultiLayerEagleMultiStepDraftExtendCudaGraphRunner.replay", "speculative/multi_layer_eagle_draft_extend_cuda_graph_runner.py"),
			sg("MultiLayerEagleDraftWorker._draft_extend_for_decode", "speculative/multi_layer_eagle_worker_v2.py"), sgMLV2Cycle), sgOuterV2),
		// 3.10: every replay in that file matches by name, the same phase.
		want{"spec.draft_extend", 3, 4}, &want{"spec.draft_extend", 2, 4}},
	{"multi-layer v2 draft extend, prepare's buffer fill",
		cat(st(sg("fill_draft_extend_prepare_buffers_triton", "speculative/multi_layer_eagle_utils.py"),
			sg("MultiLayerEagleMultiStepDraftExtendCudaGraphRunner.prepare", "speculative/multi_layer_eagle_draft_extend_cuda_graph_runner.py"),
			sg("MultiLayerEagleDraftWorker._draft_extend_for_decode", "speculative/multi_layer_eagle_worker_v2.py"), sgMLV2Cycle), sgOuterV2),
		want{"spec.draft_extend", 2, 3}, nil},
	{"multi-layer v2 eager draft extend step",
		cat(st(sg("ModelRunner.forward_extend", "model_executor/model_runner.py"), sgMRRaw, sgMRForward,
			sg("MultiLayerEagleDraftWorker._draft_extend_for_decode", "speculative/multi_layer_eagle_worker_v2.py"), sgMLV2Cycle), sgOuterV2),
		want{"spec.draft_extend", 3, 4}, nil},
	{"multi-layer v2 verify (run_eagle_verify)",
		cat(st(sgMRForward, sgTpFwd, sg("run_eagle_verify", "speculative/eagle_worker_common.py"),
			sg("MultiLayerEagleWorkerV2.verify", "speculative/multi_layer_eagle_worker_v2.py"), sgMLV2Cycle), sgOuterV2),
		want{"spec.verify", 3, 4}, nil},
	{"multi-layer v2 target prefill straight from forward_batch_generation",
		cat(st(sg("ModelRunner.forward_extend", "model_executor/model_runner.py"), sgMRRaw, sgMRForward, sgTpFwd, sgMLV2Cycle), sgOuterV2),
		want{"spec.prefill", 4, 4}, nil},
	{"multi-layer v2 draft prefill step",
		cat(st(sgMRForward, sg("MultiLayerEagleDraftWorker._draft_extend_for_prefill", "speculative/multi_layer_eagle_worker_v2.py"), sgMLV2Cycle), sgOuterV2),
		want{"spec.prefill", 1, 2}, nil},
	{"multi-layer v2 cycle body (on_publish)",
		cat(st(sg("FutureMap.publish", "managers/overlap_utils.py"), sgMLV2Cycle), sgOuterV2),
		want{"spec.cycle_other", 1, 1}, nil},
	{"multi-layer v2 draft-extend graph capture at start-up",
		st(sgGraphReplay, sg("MultiLayerEagleDraftExtendCudaGraphRunner._run_step_body", "speculative/multi_layer_eagle_draft_extend_cuda_graph_runner.py"),
			sg("MultiLayerEagleDraftExtendCudaGraphRunner.capture_one_shape", "speculative/multi_layer_eagle_draft_extend_cuda_graph_runner.py"),
			sg("MultiLayerEagleDraftWorker._capture_cuda_graphs", "speculative/multi_layer_eagle_worker_v2.py"), sgRunScheduler),
		want{"other", -1, -1}, nil},
	// StandaloneWorkerV2 inherits every cycle method (standalone_worker_v2.py,
	// newest stored version): the frames name EAGLEWorkerV2 / EagleDraftWorker.
	{"standalone v2 draft extend (inherited EagleDraftWorker frame)",
		cat(st(sgMRForward, sg("EagleDraftWorker._draft_extend_for_decode", "speculative/eagle_worker_v2.py"), sgV2Cycle), sgOuterV2),
		want{"spec.draft_extend", 1, 2}, nil},
	{"ngram: verify runs inline in the cycle function",
		cat(st(sgMRForward, sgTpFwd, sg("NGRAMWorker.forward_batch_generation", "speculative/ngram_worker.py")), sgOuterV1),
		want{"spec.cycle_other", 2, 2}, nil},
	{"same qualname outside sglang/srt",
		st(user("EAGLEWorker.verify", "target.py"), user("EAGLEWorker.forward_batch_generation", "target.py"), user("<module>", "target.py")),
		want{"other", -1, -1}, nil},
	{"start-up, no rule",
		st(sgGraphReplay, sg("CudaGraphRunner.capture", "model_executor/cuda_graph_runner.py"), sgRunScheduler),
		want{"other", -1, -1}, nil},
	{"empty stack", nil, want{"other", -1, -1}, nil},
}

// Frames shared by several vLLM stacks. V1: model runner V1
// (v1/worker/gpu_model_runner.py); V2: model runner V2 (v1/worker/gpu/).
var (
	vlRunner   = "v1/worker/gpu_model_runner.py"
	vlExecute  = vl("GPUModelRunner.execute_model", vlRunner)
	vlSample   = vl("GPUModelRunner.sample_tokens", vlRunner)
	vlOuterRPC = []Frame{torch("_DecoratorContextManager.__call__.<locals>.decorate_context", "utils/_contextlib.py")}
	vlLoop     = vl("WorkerProc.worker_busy_loop", "v1/executor/multiproc_executor.py")
	vlWorkerEx = vl("Worker.execute_model", "v1/worker/gpu_worker.py")
	vlWorkerSa = vl("Worker.sample_tokens", "v1/worker/gpu_worker.py")

	vl2Runner  = "v1/worker/gpu/model_runner.py"
	vl2Execute = vl("GPUModelRunner.execute_model", vl2Runner)
	vl2Sample  = vl("GPUModelRunner.sample_tokens", vl2Runner)
	vl2Engine  = []Frame{vl("run_method", "v1/serial_utils.py"),
		vl("UniProcExecutor.collective_rpc", "v1/executor/uniproc_executor.py"),
		vl("UniProcExecutor.execute_model", "v1/executor/uniproc_executor.py"),
		vl("EngineCore.step_with_batch_queue", "v1/engine/core.py"),
		vl("EngineCoreProc._process_engine_step", "v1/engine/core.py"),
		vl("EngineCoreProc.run_busy_loop", "v1/engine/core.py")}
	vl2Propose = vl("AutoRegressiveSpeculator.propose", "v1/worker/gpu/spec_decode/autoregressive/speculator.py")
	// A layer of the target model's eager forward, called through nn.Module.
	vlModelFwd = []Frame{
		vl("LlamaAttention.forward", "model_executor/models/llama.py"),
		torch("Module._call_impl", "nn/modules/module.py"), torch("Module._wrapped_call_impl", "nn/modules/module.py"),
		vl("LlamaForCausalLM.forward", "model_executor/models/llama.py"),
		torch("Module._call_impl", "nn/modules/module.py"), torch("Module._wrapped_call_impl", "nn/modules/module.py"),
	}
	vlLogits = []Frame{
		vl("LogitsProcessor.forward", "model_executor/layers/logits_processor.py"),
		torch("Module._call_impl", "nn/modules/module.py"), torch("Module._wrapped_call_impl", "nn/modules/module.py"),
		vl("LlamaForCausalLM.compute_logits", "model_executor/models/llama.py"),
	}
	vlReplay = torch("CUDAGraph.replay", "cuda/graphs.py")
)

var vllmCases = []stackCase{
	{"V1 target forward, full graph (verifies the previous drafts)",
		cat(st(vlReplay, vl("CUDAGraphWrapper.__call__", "compilation/cuda_graph.py"), vl("GPUModelRunner._model_forward", vlRunner), vlExecute),
			vlOuterRPC, st(vlWorkerEx, vlLoop)),
		want{"spec.target_fwd", 2, 3}, nil},
	{"V1 target forward, eager",
		cat(vlModelFwd, st(vl("GPUModelRunner._model_forward", vlRunner), vlExecute), vlOuterRPC, st(vlWorkerEx, vlLoop)),
		want{"spec.target_fwd", 6, 7}, nil},
	{"V1 target logits: compute_logits in execute_model",
		cat(vlLogits, st(vlExecute), vlOuterRPC, st(vlWorkerEx, vlLoop)),
		want{"spec.logits", 4, 4}, nil},
	{"V1 prepare inputs",
		cat(st(vl("GPUModelRunner._prepare_inputs", vlRunner), vlExecute), vlOuterRPC),
		want{"spec.prepare", 0, 1}, nil},
	{"V1 input event wait of async scheduling (a contextmanager generator)",
		st(vl("GPUModelRunner.synchronize_input_prep", vlRunner),
			frameAt("/usr/lib/python3.12/")("_GeneratorContextManager.__enter__", "contextlib.py"), vlExecute),
		want{"spec.prepare", 0, 2}, nil},
	{"V1 rejection sampling kernel",
		cat(st(frameAt("/usr/lib/python3/dist-packages/")("JITFunction.run", "triton/runtime/jit.py"),
			vl("rejection_sample", "v1/sample/rejection_sampler.py"),
			vl("RejectionSampler.forward", "v1/sample/rejection_sampler.py"),
			torch("Module._call_impl", "nn/modules/module.py"), torch("Module._wrapped_call_impl", "nn/modules/module.py"),
			vl("GPUModelRunner._sample", vlRunner), vlSample), vlOuterRPC,
			st(vlWorkerSa, vlLoop)),
		want{"spec.accept", 1, -1}, nil},
	{"V1 bonus-token sampler inside rejection sampling",
		st(vl("Sampler.forward", "v1/sample/sampler.py"), torch("Module._call_impl", "nn/modules/module.py"),
			vl("RejectionSampler.forward", "v1/sample/rejection_sampler.py"), vl("GPUModelRunner._sample", vlRunner), vlSample),
		want{"spec.accept", 2, -1}, nil},
	{"V1 sample other",
		st(vl("Sampler.forward", "v1/sample/sampler.py"), vl("GPUModelRunner._sample", vlRunner), vlSample),
		want{"spec.sample_other", 1, -1}, nil},
	{"V1 draft (closure + base proposer, graph replay)",
		st(vlReplay, vl("CUDAGraphWrapper.__call__", "compilation/cuda_graph.py"),
			vl("SpecDecodeBaseProposer.propose", "v1/spec_decode/llm_base_proposer.py"),
			vl("GPUModelRunner.propose_draft_token_ids", vlRunner),
			vl("GPUModelRunner.sample_tokens.<locals>.propose_draft_token_ids", vlRunner), vlSample),
		want{"spec.draft", 2, -1}, nil},
	{"V1 draft model's own logits stay draft",
		cat(vlLogits[:3], st(vl("Eagle3LlamaForCausalLM.compute_logits", "model_executor/models/llama_eagle3.py"),
			vl("EagleProposer.propose", "v1/spec_decode/eagle.py"), vl("GPUModelRunner.propose_draft_token_ids", vlRunner),
			vl("GPUModelRunner.sample_tokens.<locals>.propose_draft_token_ids", vlRunner), vlSample)),
		want{"spec.draft", 4, -1}, nil},
	{"draft inside execute_model (builds before the sample_tokens split)",
		st(vl("EagleProposer.propose", "v1/spec_decode/eagle.py"), vlExecute, vlLoop),
		want{"spec.draft", 0, 1}, nil},
	{"V1 draft closure itself",
		st(vl("GPUModelRunner.sample_tokens.<locals>.propose_draft_token_ids", vlRunner), vlSample),
		want{"spec.draft", 0, -1}, nil},
	{"V1 bookkeeping sync (parse_output's blocking copy)",
		st(vl("RejectionSampler.parse_output", "v1/sample/rejection_sampler.py"), vl("GPUModelRunner._bookkeeping_sync", vlRunner), vlSample),
		want{"spec.bookkeep", 1, -1}, nil},
	{"V1 take_draft_token_ids (synchronous scheduling)",
		cat(st(vl("GPUModelRunner._get_draft_token_ids_cpu", vlRunner), vl("GPUModelRunner.take_draft_token_ids", vlRunner),
			vl("Worker.take_draft_token_ids", "v1/worker/gpu_worker.py"), vlLoop)),
		want{"spec.bookkeep", 0, -1}, nil},
	{"V1 async output copy in sample_tokens",
		st(vl("AsyncGPUModelRunnerOutput.__init__", vlRunner), vlSample),
		want{"step_other", 1, -1}, nil},
	{"V1 output wait on the worker's output thread",
		st(vl("AsyncGPUModelRunnerOutput.get_output", vlRunner), vl("WorkerProc.enqueue_output", "v1/executor/multiproc_executor.py"),
			vl("WorkerProc.async_output_busy_loop", "v1/executor/multiproc_executor.py"),
			frameAt("/usr/lib/python3.12/")("Thread.run", "threading.py")),
		want{"spec.output", 0, -1}, nil},
	{"V1 execute_model body",
		st(vlExecute, vlLoop),
		want{"step_other", 0, 0}, nil},
	{"V2 target forward, full graph",
		cat(st(vlReplay, vl("ModelCudaGraphManager.run_fullgraph", "v1/worker/gpu/cudagraph_utils.py"), vl2Execute),
			vlOuterRPC, st(vlWorkerEx), vl2Engine),
		want{"spec.target_fwd", 2, 2}, nil},
	{"V2 target forward, eager",
		cat(vlModelFwd, st(vl2Execute), vlOuterRPC, st(vlWorkerEx), vl2Engine),
		want{"spec.target_fwd", 6, 6}, nil},
	{"V2 prepare inputs",
		st(vl("GPUModelRunner.prepare_attn", vl2Runner), vl2Execute),
		want{"spec.prepare", 0, 1}, nil},
	{"V2 execute_model body",
		cat(st(vl2Execute), vlOuterRPC, st(vlWorkerEx), vl2Engine),
		want{"step_other", 0, 0}, nil},
	{"V2 target logits in sample()",
		cat(vlLogits, st(vl("GPUModelRunner.sample", vl2Runner), vl2Sample), vlOuterRPC, st(vlWorkerSa)),
		want{"spec.logits", 4, -1}, nil},
	{"V2 sampler (no drafts)",
		st(vl("Sampler.__call__", "v1/worker/gpu/sample/sampler.py"), vl("GPUModelRunner.sample", vl2Runner), vl2Sample),
		want{"spec.sample_other", 0, -1}, nil},
	{"V2 sample() body",
		st(vl("GPUModelRunner.sample", vl2Runner), vl2Sample),
		want{"spec.sample_other", 0, -1}, nil},
	{"V2 rejection sampler",
		st(vl("strict_rejection_sample", "v1/worker/gpu/spec_decode/rejection_sampler.py"),
			vl("RejectionSampler.__call__", "v1/worker/gpu/spec_decode/rejection_sampler.py"), vl("GPUModelRunner.sample", vl2Runner), vl2Sample),
		want{"spec.accept", 0, -1}, nil},
	{"V2 postprocess_sampled",
		st(vl("post_update", "v1/worker/gpu/input_batch.py"), vl("GPUModelRunner.postprocess_sampled", vl2Runner), vl2Sample),
		want{"spec.bookkeep", 1, -1}, nil},
	{"V2 speculator: draft decode graph replay",
		cat(st(vlReplay, vl("SpeculatorCudaGraphManager.run_fullgraph", "v1/worker/gpu/spec_decode/autoregressive/cudagraph_utils.py"),
			vl("AutoRegressiveSpeculator._multi_step_decode", "v1/worker/gpu/spec_decode/autoregressive/speculator.py"),
			vl2Propose), vlOuterRPC, st(vl2Sample)),
		want{"spec.draft", 3, -1}, nil},
	{"V2 speculator: a graph manager method of the target's file stays draft",
		st(vlReplay, vl("CudaGraphManager.run_fullgraph", "v1/worker/gpu/cudagraph_utils.py"), vl2Propose, vl2Sample),
		want{"spec.draft", 2, -1}, nil},
	{"V2 speculator: draft logits (a forward below sample_tokens) stay draft",
		cat(vlLogits[:3], st(vl("Eagle3LlamaForCausalLM.compute_logits", "model_executor/models/llama_eagle3.py"),
			vl("DraftModelSpeculator.sample_draft", "v1/worker/gpu/spec_decode/speculator.py"),
			vl("AutoRegressiveSpeculator._prefill", "v1/worker/gpu/spec_decode/autoregressive/speculator.py"), vl2Propose), vlOuterRPC, st(vl2Sample)),
		want{"spec.draft", 6, -1}, nil},
	{"V2 async output copy in sample_tokens",
		st(vl("AsyncOutput.__init__", "v1/worker/gpu/async_utils.py"), vl2Sample),
		want{"step_other", 1, -1}, nil},
	{"V2 output wait on the WorkerAsyncOutput thread",
		st(vl("AsyncOutput.get_output", "v1/worker/gpu/async_utils.py"),
			frameAt("/usr/lib/python3.12/")("_WorkItem.run", "concurrent/futures/thread.py"),
			frameAt("/usr/lib/python3.12/")("_worker", "concurrent/futures/thread.py")),
		want{"spec.output", 0, -1}, nil},
	{"engine core step (TP=1)",
		st(vl("EngineCore.step", "v1/engine/core.py"), vl("EngineCoreProc.run_busy_loop", "v1/engine/core.py")),
		want{"loop", 0, -1}, nil},
	{"uniproc executor",
		cat(vl2Engine[1:]),
		want{"loop", 0, -1}, nil},
	{"busy loop",
		st(vlLoop),
		want{"loop", 0, -1}, nil},
}

var (
	hfUtils       = "generation/utils.py"
	hfAssisted    = hf("GenerationMixin._assisted_decoding", hfUtils)
	hfGenerate    = hf("GenerationMixin.generate", hfUtils)
	hfNoGrad      = torch("context_decorator.<locals>.decorate_context", "utils/_contextlib.py")
	hfCallImpl    = torch("Module._call_impl", "nn/modules/module.py")
	hfWrappedImpl = torch("Module._wrapped_call_impl", "nn/modules/module.py")
	hfModelFwd    = []Frame{
		hf("LlamaAttention.forward", "models/llama/modeling_llama.py"), hfCallImpl, hfWrappedImpl,
		hf("LlamaForCausalLM.forward", "models/llama/modeling_llama.py"), hfCallImpl, hfWrappedImpl,
	}
	hfOuter = []Frame{hfGenerate, hfNoGrad, user("main", "serve.py"), user("<module>", "serve.py")}
)

var hfCases = []stackCase{
	{"draft forward under get_candidates",
		cat(hfModelFwd, st(hf("GenerationMixin._sample", hfUtils), hfGenerate, hfNoGrad,
			hf("AssistedCandidateGenerator._generate_candidates", "generation/candidate_generator.py"),
			hf("AssistedCandidateGenerator.get_candidates", "generation/candidate_generator.py"), hfAssisted), hfOuter),
		want{"spec.draft", 9, 11}, nil},
	{"verify forward: Module._call_impl below _assisted_decoding",
		cat(hfModelFwd, st(hfAssisted), hfOuter),
		want{"spec.verify", 6, 6}, nil},
	{"marker as the innermost frame",
		cat(st(hfCallImpl, hfAssisted), hfOuter),
		want{"spec.verify", 1, 1}, nil},
	{"inline greedy acceptance",
		cat(st(hfAssisted), hfOuter),
		want{"spec.cycle_other", 0, 0}, nil},
	{"logits processors",
		cat(st(hf("RepetitionPenaltyLogitsProcessor.__call__", "generation/logits_process.py"),
			hf("LogitsProcessorList.__call__", "generation/logits_process.py"), hfAssisted), hfOuter),
		want{"spec.cycle_other", 2, 2}, nil},
	{"Module frames above _assisted_decoding do not count",
		cat(st(hfAssisted), hfOuter[:1], st(hf("Pipeline.forward", "pipelines/base.py"), hfCallImpl, hfWrappedImpl)),
		want{"spec.cycle_other", 0, 0}, nil},
	{"speculative sampling",
		cat(st(hf("_speculative_sampling", hfUtils), hfAssisted), hfOuter),
		want{"spec.accept", 0, 1}, nil},
	{"cache crop",
		cat(st(hf("DynamicLayer.crop", "cache_utils.py"), hf("DynamicCache.crop", "cache_utils.py"), hfAssisted), hfOuter),
		want{"spec.kv_rollback", 0, 2}, nil},
	{"5.x cache crop: Cache.crop over layers, DynamicLayer.crop under @deprecate_kwarg",
		cat(st(hf("DynamicLayer.crop", "cache_utils.py"), hf("deprecate_kwarg.<locals>.wrapper.<locals>.wrapped_func", "utils/deprecation.py"),
			hf("Cache.crop", "cache_utils.py"), hfAssisted), hfOuter),
		want{"spec.kv_rollback", 0, 3}, nil},
	{"assistant cache crop inside the draft is rollback too",
		cat(st(hf("DynamicLayer.crop", "cache_utils.py"), hf("Cache.crop", "cache_utils.py"),
			hf("AssistedCandidateGenerator._update_past_and_masks", "generation/candidate_generator.py"),
			hf("AssistedCandidateGenerator.get_candidates", "generation/candidate_generator.py"), hfAssisted), hfOuter),
		want{"spec.kv_rollback", 0, 4}, nil},
	{"draft mask growth is draft",
		cat(st(hf("_prepare_attention_mask", "generation/candidate_generator.py"),
			hf("AssistedCandidateGenerator._update_past_and_masks", "generation/candidate_generator.py"),
			hf("AssistedCandidateGenerator.get_candidates", "generation/candidate_generator.py"), hfAssisted), hfOuter),
		want{"spec.draft", 2, 3}, nil},
	{"verify input mask growth is the loop's own work",
		cat(st(hf("_prepare_attention_mask", "generation/candidate_generator.py"), hfAssisted), hfOuter),
		want{"spec.cycle_other", 1, 1}, nil},
	{"pre-4.5x rollback helper",
		cat(st(hf("_crop_past_key_values", "generation/candidate_generator.py"), hfAssisted), hfOuter),
		want{"spec.kv_rollback", 0, 1}, nil},
	{"loop condition copies the stop flag back",
		cat(st(hf("GenerationMixin._has_unfinished_sequences", hfUtils), hfAssisted), hfOuter),
		want{"spec.cycle_other", 1, 1}, nil},
	{"candidate strategy",
		cat(st(hf("AssistedCandidateGenerator.update_candidate_strategy", "generation/candidate_generator.py"), hfAssisted), hfOuter),
		want{"spec.strategy", 0, 1}, nil},
	{"universal assisted decoding",
		cat(st(hf("UniversalSpeculativeDecodingGenerator.get_candidates", "generation/candidate_generator.py"), hfAssisted), hfOuter),
		want{"spec.draft", 0, 1}, nil},
	{"MTP draft (5.x)",
		cat(st(hf("MtpLayerStack.forward", "generation/mtp.py"), hfCallImpl, hfWrappedImpl,
			hf("MTPCandidateGenerator.get_candidates", "generation/candidate_generators/mtp.py"), hfAssisted), hfOuter),
		want{"spec.draft", 0, 4}, nil},
	{"plain generate without assistant",
		cat(hfModelFwd, st(hf("GenerationMixin._sample", hfUtils)), hfOuter),
		want{"other", -1, -1}, nil},
}

func checkCases(t *testing.T, preset string, cases []stackCase) {
	t.Helper()
	p, err := LoadPreset(preset)
	if err != nil {
		t.Fatal(err)
	}
	for _, py310 := range []bool{false, true} {
		m, err := p.Compile(py310)
		if err != nil {
			t.Fatalf("Compile(%v): %v", py310, err)
		}
		for _, c := range cases {
			stack, w := c.stack, c.want
			if py310 {
				stack = as310(stack)
				if c.want310 != nil {
					w = *c.want310
				}
			}
			got := m.Resolve(stack)
			id, ok := m.PhaseID(w.phase)
			if !ok {
				t.Fatalf("%s: unknown phase %q", c.name, w.phase)
			}
			if got.Phase != id || got.Frame != w.frame || got.CycleFrame != w.cycle {
				t.Errorf("py310=%v %s: got %s frame %d cycle %d, want %s frame %d cycle %d",
					py310, c.name, m.PhaseName(got.Phase), got.Frame, got.CycleFrame, w.phase, w.frame, w.cycle)
			}
			if cw := classifyWalk(m, stack); cw != got.Phase {
				t.Errorf("py310=%v %s: Classify walk gives %s, Resolve %s", py310, c.name, m.PhaseName(cw), m.PhaseName(got.Phase))
			}
		}
	}
}

// classifyWalk is what the BPF fast path does with the per-frame cache.
func classifyWalk(m *Matcher, frames []Frame) uint16 {
	marker := false
	for _, f := range frames {
		c := m.Classify(f)
		if c.Phase != 0 {
			if marker && c.AltPhase != 0 {
				return c.AltPhase
			}
			return c.Phase
		}
		marker = marker || c.Marker
	}
	return 0
}

func TestSGLangStacks(t *testing.T) { checkCases(t, "sglang-eagle", sglangCases) }
func TestVLLMStacks(t *testing.T)   { checkCases(t, "vllm-eagle", vllmCases) }
func TestHFStacks(t *testing.T)     { checkCases(t, "hf-assisted", hfCases) }

// On 3.10 the name `verify` alone is ambiguous; the file decides.
func TestPy310VerifyByFile(t *testing.T) {
	p, err := LoadPreset("sglang-eagle")
	if err != nil {
		t.Fatal(err)
	}
	m, err := p.Compile(true)
	if err != nil {
		t.Fatal(err)
	}
	if !m.Py310() {
		t.Fatal("Py310() = false")
	}
	for _, c := range []struct {
		file, want string
	}{
		{"speculative/eagle_worker.py", "spec.verify"},
		{"speculative/eagle_worker_v2.py", "spec.verify"},
		{"speculative/multi_layer_eagle_worker.py", "spec.verify"},
		{"speculative/eagle_info.py", "spec.accept"},
		{"speculative/eagle_utils.py", "spec.accept"},
		{"speculative/ngram_info.py", "other"},
		{"speculative/eagle_worker.pyc", "other"},
	} {
		f := Frame{Qualname: "verify", Name: "verify", Filename: "/usr/lib/python3.10/site-packages/sglang/srt/" + c.file}
		if got := m.PhaseName(m.Resolve([]Frame{f}).Phase); got != c.want {
			t.Errorf("verify in %s: got %s, want %s", c.file, got, c.want)
		}
		if got := m.PhaseName(m.Classify(f).Phase); got != c.want {
			t.Errorf("Classify verify in %s: got %s, want %s", c.file, got, c.want)
		}
	}
	// TpModelWorker's forward_batch_generation is not a cycle on 3.10 either.
	if m.Classify(as310(st(sgTpFwd))[0]).Cycle {
		t.Error("tp_worker.py forward_batch_generation classified as the cycle")
	}
	if !m.Classify(as310(st(sgV1Cycle))[0]).Cycle {
		t.Error("eagle_worker.py forward_batch_generation not classified as the cycle")
	}
}

// A 3.11+ matcher ignores co_name-only coincidences: the qualname decides.
func TestPy311QualnameDecides(t *testing.T) {
	p, _ := LoadPreset("sglang-eagle")
	m, err := p.Compile(false)
	if err != nil {
		t.Fatal(err)
	}
	f := sg("NgramVerifyInput.verify", "speculative/eagle_info.py")
	if got := m.PhaseName(m.Classify(f).Phase); got != "other" {
		t.Errorf("NgramVerifyInput.verify: got %s, want other", got)
	}
}

func TestPhaseIDs(t *testing.T) {
	p, _ := LoadPreset("sglang-eagle")
	m, err := p.Compile(false)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"spec.draft", "spec.verify", "spec.accept", "spec.draft_extend", "spec.cycle_other", "spec.prefill",
		"sched.result", "sched.metrics", "sched.batch", "sched.recv", "sched.run_other", "sched.loop", "other"}
	if got := m.Phases(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("Phases() = %v, want %v", got, want)
	}
	if id, ok := m.PhaseID("other"); !ok || id != 0 || m.PhaseName(0) != "other" {
		t.Errorf("other: id %d ok %v name %q", id, ok, m.PhaseName(0))
	}
	for i, n := range want[:len(want)-1] {
		id, ok := m.PhaseID(n)
		if !ok || int(id) != i+1 || m.PhaseName(id) != n {
			t.Errorf("%s: id %d ok %v, want id %d", n, id, ok, i+1)
		}
	}
	if _, ok := m.PhaseID("spec.nope"); ok {
		t.Error("PhaseID of an unknown phase succeeded")
	}
	if m.PhaseName(200) != "" || m.NumPhases() != len(want) {
		t.Errorf("PhaseName(200) = %q, NumPhases = %d", m.PhaseName(200), m.NumPhases())
	}
	if m.PhaseName(m.CycleStartPhase()) != "spec.draft" || m.Name() != "sglang-eagle" {
		t.Errorf("start phase %q, name %q", m.PhaseName(m.CycleStartPhase()), m.Name())
	}
}

func TestMatchProcess(t *testing.T) {
	for _, c := range []struct {
		preset, cmdline string
		want            bool
	}{
		{"sglang-eagle", "sglang::scheduler_TP3", true},
		{"sglang-eagle", "sglang::scheduler_DP0_PP1_TP2_EP0", true},
		{"sglang-eagle", "sglang::detokenizer", false},
		{"sglang-eagle", "python3\x00-m\x00sglang.launch_server\x00--model\x00x\x00", false},
		{"vllm-eagle", "VLLM::Worker_TP0_EP0", true},
		{"vllm-eagle", "VLLM::EngineCore", true},
		{"vllm-eagle", "vllm\x00serve\x00", false},
		{"hf-assisted", "python3\x00serve.py\x00", true},
	} {
		p, _ := LoadPreset(c.preset)
		m, err := p.Compile(false)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.MatchProcess(c.cmdline); got != c.want {
			t.Errorf("%s MatchProcess(%q) = %v, want %v", c.preset, c.cmdline, got, c.want)
		}
	}
	p, _ := LoadPreset("sglang-eagle")
	m, _ := p.Compile(false)
	if !m.MainThreadOnly() {
		t.Error("sglang-eagle: MainThreadOnly() = false")
	}
}

// Every rule of every preset must match some frame of the test stacks or
// of extra below: a rule nothing matches is a typo.
func TestEveryRuleMatchesSomething(t *testing.T) {
	extra := map[string][]Frame{
		"sglang-eagle": {
			sg("EAGLEWorker._draft_preprocess_idle", "speculative/eagle_worker.py"),
			sg("Scheduler.process_input_requests", "managers/scheduler.py"),
			sg("Scheduler.get_new_batch_prefill", "managers/scheduler.py"),
		},
		"vllm-eagle": {
			vl("GPUModelRunner._update_states", vlRunner),
			vl("GPUModelRunner._calc_spec_decode_metadata", vlRunner),
			vl("EngineCore.step_with_batch_queue", "v1/engine/core.py"),
		},
	}
	for preset, cases := range map[string][]stackCase{"sglang-eagle": sglangCases, "vllm-eagle": vllmCases, "hf-assisted": hfCases} {
		p, err := LoadPreset(preset)
		if err != nil {
			t.Fatal(err)
		}
		frames := extra[preset]
		for _, c := range cases {
			frames = append(frames, c.stack...)
		}
		for _, py310 := range []bool{false, true} {
			m, err := p.Compile(py310)
			if err != nil {
				t.Fatal(err)
			}
			in := frames
			if py310 {
				in = as310(frames)
			}
			for i, r := range m.rules {
				hit := false
				for _, f := range in {
					if r.match(f) {
						hit = true
						break
					}
				}
				if !hit {
					t.Errorf("%s py310=%v: rule %d (phase %s) matches no test frame", preset, py310, i+1, m.PhaseName(r.phase))
				}
			}
		}
	}
}
