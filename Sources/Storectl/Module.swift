import StoreBase
