"""The typer CLI: thin commands; the ONE place errors become exit codes is main.main()."""
