"""Hostlist expressions, expanded and compressed like `scontrol show hostnames/hostlist`."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nvrx.slurm import SlurmParseError, compress, expand
from nvrx.slurm.hostlist import MAX_EXPANDED_HOSTS


@pytest.mark.parametrize(
    ("expr", "hosts"),
    [
        ("n[001-004,007],gpu[1-2]", ["n001", "n002", "n003", "n004", "n007", "gpu1", "gpu2"]),
        ("node1", ["node1"]),
        ("", []),
        ("a,b", ["a", "b"]),
        ("n[8-11]", ["n8", "n9", "n10", "n11"]),
        ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
        ("n[09-10]", ["n09", "n10"]),
        ("n[1-2]-ib", ["n1-ib", "n2-ib"]),
        ("n[00-02]", ["n00", "n01", "n02"]),
        ("n[1-2,05]", ["n1", "n2", "n05"]),
    ],
)
def test_expand(expr: str, hosts: list[str]) -> None:
    assert expand(expr) == hosts


@pytest.mark.parametrize(
    ("hosts", "expr"),
    [
        (["n001", "n002", "n003", "n004", "n007", "gpu1", "gpu2"], "gpu[1-2],n[001-004,007]"),
        (["n3", "n1", "n2"], "n[1-3]"),
        (["n1"], "n1"),
        (["login", "login"], "login"),
        (["n9", "n10", "n11"], "n[9-11]"),
        (["n099", "n100"], "n[099-100]"),
        (["n01", "n1"], "n01,n1"),
        (["n10", "n1", "n2", "n3", "n7", "n8"], "n[1-3,7-8,10]"),
        (["n5", "n3"], "n[3,5]"),
        (["42", "41"], "[41-42]"),
        ([], ""),
    ],
)
def test_compress(hosts: list[str], expr: str) -> None:
    assert compress(hosts) == expr


@pytest.mark.parametrize("bad", ["n[1-", "n]1[", "n[3-1]", "n[a-b]", "n[1-2][", "n[[1]]", "n[]"])
def test_malformed_expressions_are_rejected_with_the_expression_named(bad: str) -> None:
    with pytest.raises(SlurmParseError, match="hostlist"):
        expand(bad)


def test_absurd_ranges_are_refused_not_allocated() -> None:
    with pytest.raises(SlurmParseError, match="too large"):
        expand("n[0-99999999]")


def test_the_host_limit_counts_every_part_of_a_list() -> None:
    assert len(expand(f"a[1-{MAX_EXPANDED_HOSTS - 1}],b")) == MAX_EXPANDED_HOSTS
    with pytest.raises(SlurmParseError, match="too large"):
        expand(f"a[1-{MAX_EXPANDED_HOSTS - 1}],b[1-2]")


hostnames = st.builds(
    lambda prefix, num, width: prefix + (str(num).zfill(width) if num is not None else ""),
    st.sampled_from(["n", "gpu", "rack-a", "x"]),
    st.one_of(st.none(), st.integers(0, 300)),
    st.sampled_from([0, 2, 3]),
)


@given(st.lists(hostnames, max_size=40))
def test_compress_then_expand_gives_back_the_same_hosts(hosts: list[str]) -> None:
    again = expand(compress(hosts))
    assert sorted(again) == sorted(set(hosts))
