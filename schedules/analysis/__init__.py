"""TIR readers: what a fused PrimFunc computes, read from its blocks and index arithmetic.

Templates plan from these readings, printers print from them and the timing model counts its
work with them, so they sit apart from any one template. They need only TIR, never the SoC:
``tir_walk`` (blocks, buffers, reductions), ``tile_values`` (a tile's value plan),
``row_program`` (a row-wise program over reduced rows), ``movement_program`` (copies and
gathers of data movement), ``pool_window`` (a pooling window), ``attention_shape`` (an
attention group as index maps) and ``epilogue_checks`` (what an epilogue may hold).
"""
