r"""One store of unit files for every many-run command (``scale.paper``'s grid, ``scale.replicate``'s ledger).

    files     the unit files' names, keys and folders; writing (once), reading (bounded, each record checked
              against its schema and against what its name says before any field is used), loading a plan's
              units with one line for each file left out; links on the store's folders refused
    schema    the records' schemas (a unit of the grid, of the ledger; a registration, an amendment) and the
              small validator that checks a record against one

    OUT/units/<plan>--<unit name>--<device>-t<threads>--<key>.json     one immutable file per finished unit

A unit's identity is what its file's name says (plan, unit, where it ran, key) and what its plan says of it
(experiment, seed, labels, the key its settings hash to); its content must say the same before it is used.
The grid (``scale.grid.unit_files``) and the ledger (``scale.ledger.store``) add what their keys are made of.
"""
