"""`testbed impair` at the CLI boundary: bad inventories and profiles get one clear line."""

from orchestrator.cli.main import main


def _run(capsys, *argv):
    code = main(list(argv))
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def test_missing_inventory_file(capsys, tmp_path):
    code, _out, err = _run(capsys, "impair", "show", "--inventory", str(tmp_path / "nope.yml"))
    assert code == 1 and "inventory file not found" in err and "Traceback" not in err


def test_inventory_without_the_lab_groups(capsys, tmp_path):
    inv = tmp_path / "lab.yml"
    inv.write_text("all:\n  hosts:\n    somebox:\n      ansible_connection: local\n")
    code, _out, err = _run(capsys, "impair", "show", "--inventory", str(inv))
    assert code == 1 and "broker" in err and "Traceback" not in err


def test_unknown_profile_is_refused_before_anything(capsys, tmp_path):
    inv = tmp_path / "lab.yml"
    inv.write_text("all:\n  hosts: {}\n")
    code, _out, err = _run(capsys, "impair", "apply", "nope", "--inventory", str(inv))
    assert code == 1 and "unknown impairment profile: 'nope'" in err
