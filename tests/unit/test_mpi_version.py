"""The one reader of `mpirun --version` (smoke test, run, doctor)."""

from __future__ import annotations

from mpicluster.nodes import mpi_version

OPEN_MPI_5 = "mpirun (Open MPI) 5.0.7\n\nReport bugs to https://www.open-mpi.org/community/help/\n"
OPEN_MPI_4 = "mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/"
PRRTE = "prterun (Open MPI) 5.0.7\n"
MPICH = "HYDRA build details:\n    Version:                                 4.0.2\n"
INTEL = "Intel(R) MPI Library for Linux* OS, Version 2021.10 Build 20230619 (id: 1234)\n"


def test_open_mpi_series_and_version():
    for text, version, major in ((OPEN_MPI_5, "5.0.7", 5), (OPEN_MPI_4, "4.1.4", 4)):
        found = mpi_version.parse(text)
        assert found.is_open_mpi and found.version == version and found.major == major
        assert found.name == f"Open MPI {version}"
    assert mpi_version.parse(PRRTE).major == 5
    assert mpi_version.parse(OPEN_MPI_4).numbers == (4, 1, 4) < (5, 0, 3)
    assert mpi_version.parse(OPEN_MPI_5).numbers == (5, 0, 7)
    assert mpi_version.parse(INTEL).numbers == (2021, 10)
    assert mpi_version.parse("HYDRA\n").numbers == ()  # the version is "?"


def test_other_mpis_are_named_and_not_open_mpi():
    assert mpi_version.parse(MPICH).name == "MPICH 4.0.2 (Hydra)"
    assert mpi_version.parse(INTEL).name == "Intel MPI 2021.10"
    assert not mpi_version.parse(MPICH).is_open_mpi
    assert mpi_version.parse("HYDRA\n").name == "MPICH ? (Hydra)"


def test_unrecognised_output_keeps_its_first_line_and_has_no_major():
    found = mpi_version.parse("bash: mpirun: command not found\nmore\n")
    assert found.major is None and not found.is_open_mpi
    assert found.name == "unknown MPI (bash: mpirun: command not found)"
    assert mpi_version.parse("").first_line == ""


def test_a_probe_identity_by_name():
    assert mpi_version.mpi_name({"version_text": OPEN_MPI_4}) == "Open MPI 4.1.4"
    assert mpi_version.mpi_name({"version_text": "", "exit_code": 127}) == (
        "unknown MPI (exit 127)"
    )
    assert mpi_version.mpi_name(None) is None
