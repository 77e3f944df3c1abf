"""Reading XLA's HLO text in tests (no TensorFlow or JAX import: both test suites use it)."""

import re


def output_conditional_arrays(hlo, shapes):
    """``(committing, other)``: how many arrays of ``shapes`` (HLO shape strings) each
    branch of the one conditional whose result holds such an array takes. Reads operand
    names whether or not the HLO prints their shapes beside them (older XLA does), and
    ``true_computation`` (TensorFlow) or ``branch_computations`` (JAX: false, then true)."""
    lines, found = hlo.splitlines(), []
    for line in lines:
        pattern = r"=\s*(.*?)\s+conditional\((.*?)\),\s*(true_computation|branch_computations)"
        match = re.search(pattern, line)
        if match and any(s in match.group(1) for s in shapes):
            found.append(match)
    assert len(found) == 1, [m.group(0) for m in found]
    names = re.findall(r"%[\w.\-]+", found[0].group(2))
    true_first = found[0].group(3) == "true_computation"
    committing, other = (names[1], names[2]) if true_first else (names[2], names[1])

    def count(name):
        (line,) = [x for x in lines if re.match(rf"\s*(ROOT\s+)?{re.escape(name)}\s*=", x)]
        return sum(line.split("=", 1)[1].split(" tuple(")[0].count(s) for s in shapes)

    return count(committing), count(other)
