"""``zephon.ops.grouping``: groups of mixture components that may share a packed sample.

:class:`DomainGroups` is the value ``pack_sequences(homogeneity="group", groups=...)`` takes in
zephon 0.2.0: a map ``group name -> component names``, checked at construction into an owned map
``component -> group`` (a component in at most one group; components in no group are their own
group).  Its checks and messages follow zephon's (``tests/unit/test_domain_groups.py`` compares
them); the packer (zephon_ref/ops/pack.py) resolves the member names to component ids through the
engine's vocabulary and keeps one packing group per group, ungrouped components packing alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set

from zephon_ref.errors import ConfigError, ConfigTypeError, expected

__all__ = ["DomainGroups"]


class DomainGroups:
    """Component-name groups; ``to_member_map()`` is ``{component: group}`` for grouped components.

    Members may be any sequence of names (a bare string is refused, it would read as letters); a
    set is read in sorted order, so the member map never depends on string hashing.  Equality is
    identity, as in zephon.
    """

    __slots__ = ("_member_to_group",)

    def __init__(self, groups: Mapping[str, Iterable[str]]) -> None:
        if groups is not None and not isinstance(groups, Mapping):
            raise ConfigTypeError(expected("DomainGroups groups", "a mapping group name -> component names",
                                           type(groups).__name__))
        if not groups:
            raise ConfigError("DomainGroups requires at least one group; use None for no grouping.")
        owner: dict[str, str] = {}
        for name, members in groups.items():
            if not isinstance(name, str) or not name:
                raise ConfigError(f"DomainGroups: group name must be a non-empty string, got {name!r}")
            if isinstance(members, (str, bytes)):
                raise ConfigError(f"DomainGroups: group {name!r} members must be a sequence (e.g. a list) of "
                                  f"component names, not a bare string {members!r}.")
            if not isinstance(members, Iterable):
                raise ConfigTypeError(expected(f"DomainGroups group {name!r}",
                                               "a sequence of component names", type(members).__name__))
            listed = sorted(members, key=repr) if isinstance(members, Set) else list(members)
            if not listed:
                raise ConfigError(f"DomainGroups: group {name!r} has no member components")
            seen: set[str] = set()
            for member in listed:
                if not isinstance(member, str) or not member:
                    raise ConfigError(f"DomainGroups: group {name!r} member must be a non-empty string, "
                                      f"got {member!r}")
                if member in seen:
                    raise ConfigError(f"DomainGroups: component {member!r} listed twice in group {name!r}")
                if member in owner:
                    raise ConfigError(f"DomainGroups: component {member!r} appears in multiple groups "
                                      f"({owner[member]!r} and {name!r}); a component belongs to at most "
                                      "one packing domain")
                seen.add(member)
                owner[member] = name
        self._member_to_group = owner

    def to_member_map(self) -> dict[str, str]:
        """A fresh ``{component: group}`` dict of the grouped components, in the order given."""
        return dict(self._member_to_group)

    def validate_against(self, known_components: Iterable[str]) -> None:
        """Raise ConfigError naming every grouped component that ``known_components`` lacks."""
        known = sorted(set(known_components))
        missing = sorted(set(self._member_to_group) - set(known))
        if missing:
            raise ConfigError(f"DomainGroups references components not in the mixture: {missing}. "
                              f"Known components: {known}")

    def __repr__(self) -> str:
        groups: dict[str, list[str]] = {}
        for member, group in self._member_to_group.items():
            groups.setdefault(group, []).append(member)
        return f"DomainGroups({groups!r})"
