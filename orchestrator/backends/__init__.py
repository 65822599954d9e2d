"""Everything that touches the outside world, one module per outside tool."""
