"""vllm/v1/worker/gpu/block_table.py: BlockTables gathers the batch's block tables and computes
its slot mappings (triton kernels)."""

import simgpu


class BlockTables(object):
    def gather_block_tables(self, idx_mapping, num_reqs_padded):
        simgpu.GPU.launch("gather_block_tables", num_reqs_padded)
        return ("block_table",)

    def compute_slot_mappings(self, idx_mapping, query_start_loc, positions, num_tokens_padded):
        simgpu.GPU.launch("compute_slot_mappings", num_tokens_padded)
        return "slot_mappings"
