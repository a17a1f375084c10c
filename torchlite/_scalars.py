"""Numbers computed in a graph from numbers the frame takes per call (capture/scalar_inputs.h):
the graph returns them as 0-d int64/float64 tensors; CPython gets Python numbers back."""


def item(values):
    """The Python number of the 0-d tensor `values[0]` (a residual builder: called with the
    tuple of its items), as `int`/`float` eager code computed it."""
    return values[0].item()
