"""scripts/docs_check.py: a quoted output that drifts from its command's output fails, --update carries it."""
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "docs_check.py"

DOC = """# Tutorial

<!-- output: study.txt -->
```
  variant  executions  span us
...
  fused             1    378.2
Measured, not modeled: simulated in 1.60 s of wall time.
```

<!-- output: gate.txt, - -->
```
$ sightline check profiles/naive
status: pass
$ echo $?
0
```
"""

STUDY = """== comparison ==
  variant  executions  span us
  naive             6   1923.4
  fused             1    378.2
Measured, not modeled: simulated in 0.91 s of wall time.
"""


def run(root, out, *flags):
    return subprocess.run([sys.executable, str(SCRIPT), str(out), "--root", str(root), *flags],
                          capture_output=True, text=True)


def tree(tmp_path, doc=DOC, study=STUDY):
    root, out = tmp_path / "repo", tmp_path / "out"
    (root / "docs").mkdir(parents=True)
    out.mkdir()
    (root / "docs" / "tutorial.md").write_text(doc)
    (out / "study.txt").write_text(study)
    (out / "gate.txt").write_text("status: pass\n")
    return root, out


def test_equal_outputs_pass_and_measured_figures_may_differ(tmp_path):
    root, out = tree(tmp_path)
    result = run(root, out)
    assert result.returncode == 0, result.stdout
    assert "2 quoted outputs equal" in result.stdout


def test_a_changed_figure_fails_naming_the_line_and_update_carries_it(tmp_path):
    root, out = tree(tmp_path, study=STUDY.replace("378.2", "370.9"))
    result = run(root, out)
    assert result.returncode == 1
    assert "docs/tutorial.md:7: not in the output" in result.stdout
    assert "fused             1    378.2" in result.stdout
    updated = run(root, out, "--update")
    assert updated.returncode == 0, updated.stdout
    text = (root / "docs" / "tutorial.md").read_text()
    assert "  fused             1    370.9" in text and "378.2" not in text
    assert "simulated in 1.60 s" in text  # a measured line is left as written
    assert run(root, out).returncode == 0


def test_lines_out_of_order_fail(tmp_path):
    doc = DOC.replace("...\n  fused             1    378.2\n", "  fused             1    378.2\n  naive             6   1923.4\n")
    root, out = tree(tmp_path, doc=doc)
    assert run(root, out).returncode == 1


def test_a_missing_file_and_a_misplaced_marker_are_named(tmp_path):
    root, out = tree(tmp_path, doc=DOC.replace("gate.txt", "nothing.txt") + "\n<!-- output: study.txt -->\ntext\n")
    result = run(root, out)
    assert result.returncode == 1
    assert "nothing.txt is not in" in result.stdout
    assert "must stand just before a code block" in result.stdout
