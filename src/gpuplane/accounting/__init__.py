"""Accounting: what runs and services cost, how runs ended, chargeback per team and period. Pure.

The runtimes report facts (a run held these GPUs of this pool from here to there and lost this much work;
it ended so; a service used these GPU-hours for these requests and tokens); this package prices and
counts them the same way in the simulator, the live plane and the reports.
"""

from gpuplane.accounting.chargeback import PERIODS, ChargebackRow, chargeback
from gpuplane.accounting.ledger import CostLedger, PeriodUsage
from gpuplane.accounting.outcomes import OutcomeTally
from gpuplane.accounting.prices import PoolPrice, price_book
from gpuplane.accounting.serving import UnitCosts, unit_costs
from gpuplane.accounting.usage import Usage, charge

__all__ = [
    "PERIODS",
    "ChargebackRow",
    "CostLedger",
    "OutcomeTally",
    "PeriodUsage",
    "PoolPrice",
    "UnitCosts",
    "Usage",
    "charge",
    "chargeback",
    "price_book",
    "unit_costs",
]
